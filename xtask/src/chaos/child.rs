//! The leader-only command of a chaos world: `xtask chaos-child`, which
//! `hoplock run` starts for each term. It writes to the fenced downstream
//! with the generation it was started under (`HOPLOCK_GENERATION`) as its
//! token, every `--every-ms`, until it is stopped: SIGTERM ends it at once
//! unless `--ignore-sigterm` (then only the runner's SIGKILL does), and
//! `--exit-after-ms` makes it exit by itself, as a job that finishes.
//!
//! It is the harness's own binary so that a chaos run needs nothing but
//! what the workspace builds; it has no runtime, just a socket per write.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: xtask chaos-child --downstream HOST:PORT --node NAME --key KEY --every-ms N \
[--ignore-sigterm] [--exit-after-ms N]";

/// Runs the command; returns only when it exits by itself.
#[allow(clippy::disallowed_methods)] // A real process in real time.
pub fn run(args: &[String]) -> Result<(), String> {
    let (mut downstream, mut node, mut key) = (None, None, None);
    let (mut every_ms, mut ignore_sigterm, mut exit_after_ms) = (200u64, false, None);
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().cloned().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--downstream" => downstream = Some(value()?),
            "--node" => node = Some(value()?),
            "--key" => key = Some(value()?),
            "--every-ms" => every_ms = value()?.parse().map_err(|err| format!("--every-ms: {err}"))?,
            "--exit-after-ms" => {
                exit_after_ms = Some(value()?.parse::<u64>().map_err(|err| format!("--exit-after-ms: {err}"))?)
            }
            "--ignore-sigterm" => ignore_sigterm = true,
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    let (Some(downstream), Some(node), Some(key)) = (downstream, node, key) else {
        return Err(USAGE.into());
    };
    let token: u64 = std::env::var("HOPLOCK_GENERATION")
        .map_err(|_| "HOPLOCK_GENERATION is not set: run me under `hoplock run`".to_string())?
        .parse()
        .map_err(|err| format!("HOPLOCK_GENERATION: {err}"))?;
    if ignore_sigterm {
        // SAFETY: setting a signal's disposition to SIG_IGN installs no handler.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        }
    }
    let started = Instant::now();
    // SAFETY: getppid has no preconditions.
    let runner = unsafe { libc::getppid() };
    let target = format!("/write?key={key}&token={token}&node={node}");
    loop {
        if exit_after_ms.is_some_and(|after| started.elapsed() >= Duration::from_millis(after)) {
            return Ok(());
        }
        // An orphan (its runner gone without the kernel's signal reaching
        // it) must not go on writing as a leader.
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != runner {
            return Err("the runner that started this command is gone".into());
        }
        // A write that fails (the downstream gone at the end of a run) is
        // not the command's business: it writes again next time.
        let _ = write_once(&downstream, &target);
        std::thread::sleep(Duration::from_millis(every_ms));
    }
}

/// One POST, waiting for the answer: the next write goes only after the
/// downstream has judged this one, so none is in flight once it stops.
fn write_once(downstream: &str, target: &str) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(downstream)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let request =
        format!("POST {target} HTTP/1.1\r\nHost: {downstream}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    Ok(())
}
