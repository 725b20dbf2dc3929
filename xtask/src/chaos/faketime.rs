//! libfaketime for the chaos worlds' clocks: Debian's `libfaketime`
//! package fetched into `.tools/faketime` (no root, nothing installed on the
//! system), and the environment that offsets a process's wall clock and
//! makes its clocks run fast or slow.
//!
//! What it does to the `hoplock` binary (libfaketime 0.9.10, Debian 12,
//! x86_64, measured with a probe and with `hoplock run` itself):
//!
//! - `SystemTime::now()` (CLOCK_REALTIME) takes the offset and the rate: the
//!   binary's JSON log times move by the offset, and it reports the S3
//!   server's clock as that far off.
//! - `Instant::now()` (CLOCK_MONOTONIC), tokio's timers and `thread::sleep`
//!   are faked too unless `FAKETIME_DONT_FAKE_MONOTONIC=1`; then the
//!   monotonic clock reads as the fake wall time and runs at the rate (three
//!   5 s tokio sleeps at `x1.01` took 14.87 s of real time).
//! - The catch with a faked monotonic clock: timed futex waits
//!   (`Condvar::wait_timeout`, `park_timeout`, a tokio runtime without its
//!   IO driver) hand the kernel an absolute monotonic deadline that
//!   libfaketime cannot translate, and never wake. `hoplock run` uses tokio
//!   with its IO driver (epoll timeouts are relative) and does not hang; the
//!   chaos command sleeps with `thread::sleep`, which is translated. So the
//!   monotonic clock is faked only for a drift, where the elector's timers
//!   must run at the drifted rate.
//! - The command a runner starts inherits the preload: it runs on the same
//!   fake clock, as it would on the same host.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Debian binary package that holds the preload libraries.
const PACKAGE: &str = "libfaketime";
/// The multi-threaded variant: it serialises libfaketime's internal caches
/// across threads, which tokio's worker threads need.
const LIB_NAME: &str = "libfaketimeMT.so.1";

const MANUAL: &str = "to install by hand: `cd $(mktemp -d) && apt-get download libfaketime \
&& dpkg-deb -x libfaketime_*.deb <root>/.tools/faketime` (as root, `apt-get update` first if \
apt-get cannot locate the package; or `apt-get install libfaketime` system-wide and use \
/usr/lib/<multiarch>/faketime/libfaketimeMT.so.1)";

/// Makes sure `root/.tools/faketime` holds libfaketime and returns the path
/// of the preload library (`.../faketime/libfaketimeMT.so.1`). Idempotent:
/// a present library is returned without running anything.
pub fn install(root: &Path) -> Result<PathBuf, String> {
    let dest = root.join(".tools").join("faketime");
    if let Some(lib) = find_lib(&dest) {
        return Ok(lib);
    }
    if !cfg!(target_os = "linux") {
        return Err("libfaketime via LD_PRELOAD is only set up for Linux here".into());
    }
    let tools = root.join(".tools");
    fs::create_dir_all(&tools).map_err(|e| format!("cannot create {}: {e}", tools.display()))?;
    // Everything happens in a scratch folder, moved into place at the end, so
    // an interrupted install leaves no half-extracted tree behind.
    let work = tools.join(format!("faketime.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    let result = download_and_extract(&work).and_then(|()| {
        let staged = work.join("root");
        match fs::rename(&staged, &dest) {
            Ok(()) => {}
            // Someone else (a parallel test) installed it meanwhile: fine.
            Err(_) if find_lib(&dest).is_some() => {}
            Err(e) => return Err(format!("cannot move {} to {}: {e}", staged.display(), dest.display())),
        }
        find_lib(&dest).ok_or_else(|| {
            format!("the {PACKAGE} package was extracted into {} but holds no {LIB_NAME}", dest.display())
        })
    });
    let _ = fs::remove_dir_all(&work);
    result.map_err(|e| format!("installing libfaketime failed: {e}; {MANUAL}"))
}

/// The environment for a process whose wall clock is `offset_ms` ahead of
/// the real one (negative: behind) and whose clocks run at the rate
/// `1 + drift_ppb / 1e9` (counted from the process's start).
///
/// - `LD_PRELOAD`: the library (replaces any other preload of the caller).
/// - `FAKETIME`: `"+S.mmm"` / `"-S.mmm"`, a relative offset in seconds with a
///   fraction, then `" xR"` with the speed factor when `drift_ppb != 0`,
///   e.g. `"-1.250 x1.000050000"`. libfaketime parses the numbers with
///   atof() in its constructor, before any setlocale(), so '.' is right.
/// - With `drift_ppb == 0`, `FAKETIME_DONT_FAKE_MONOTONIC=1`: faking the
///   monotonic clock would add nothing but the futex-timeout hazard (module
///   doc). With a drift the monotonic clock is faked, so that Instant and
///   tokio timers drift too; use [`env_wall_only`] to drift the wall clock
///   alone.
pub fn env(lib: &Path, offset_ms: i64, drift_ppb: i64) -> Vec<(String, String)> {
    let mut env =
        vec![("LD_PRELOAD".into(), lib.display().to_string()), ("FAKETIME".into(), spec(offset_ms, drift_ppb))];
    if drift_ppb == 0 {
        env.push(("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()));
    }
    env
}

/// The `FAKETIME` value: `"+12.345"`, `"-0.250 x0.999990000"`.
pub fn spec(offset_ms: i64, drift_ppb: i64) -> String {
    // The plan refuses a clock that stands still or runs back; a rate of
    // at least one part per billion is kept here all the same.
    let drift_ppb = drift_ppb.max(-999_999_999);
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let abs = offset_ms.unsigned_abs();
    let mut s = format!("{sign}{}.{:03}", abs / 1000, abs % 1000);
    if drift_ppb != 0 {
        let rate = 1_000_000_000 + drift_ppb; // in units of 1e-9
        s.push_str(&format!(" x{}.{:09}", rate / 1_000_000_000, rate % 1_000_000_000));
    }
    s
}

fn find_lib(dir: &Path) -> Option<PathBuf> {
    let entries = fs::read_dir(dir).ok()?;
    let mut subdirs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            subdirs.push(path);
        } else if entry.file_name() == LIB_NAME {
            return Some(path);
        }
    }
    subdirs.iter().find_map(|d| find_lib(d))
}

fn download_and_extract(work: &Path) -> Result<(), String> {
    let debs = work.join("debs");
    fs::create_dir_all(&debs).map_err(|e| format!("cannot create {}: {e}", debs.display()))?;
    // 1. With the machine's package lists (no root needed for `download`).
    let first = apt(&debs, &[], &["download", PACKAGE]);
    if first.is_err() {
        // 2. A fresh image has no lists (`Unable to locate package`) and a
        //    non-root user cannot `apt-get update` the system's: fetch private
        //    lists into the scratch folder and download with those.
        let lists = work.join("apt/lists");
        let cache = work.join("apt/cache");
        for d in [lists.join("partial"), cache.join("archives/partial")] {
            fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        let opts = [
            format!("Dir::State::Lists={}", lists.display()),
            format!("Dir::Cache={}", cache.display()),
            "Debug::NoLocking=1".to_string(),
        ];
        // Some sources may fail (warnings); only the download's outcome counts.
        let update = apt(&debs, &opts, &["update"]);
        apt(&debs, &opts, &["download", PACKAGE]).map_err(|second| {
            format!(
                "`apt-get download {PACKAGE}` failed ({}); after a private `apt-get update` \
                 ({}) it failed again ({second})",
                first.as_ref().unwrap_err(),
                match &update {
                    Ok(()) => "which succeeded".to_string(),
                    Err(e) => format!("which failed: {e}"),
                }
            )
        })?;
    }
    let deb = fs::read_dir(&debs)
        .map_err(|e| format!("cannot list {}: {e}", debs.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| format!("apt-get reported success but left no .deb in {}", debs.display()))?;
    let staged = work.join("root");
    run_quietly(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&staged))
        .map_err(|e| format!("extracting {} failed: {e}", deb.display()))
}

fn apt(cwd: &Path, opts: &[String], args: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new("apt-get");
    cmd.current_dir(cwd).arg("-q");
    for o in opts {
        cmd.arg("-o").arg(o);
    }
    cmd.args(args);
    run_quietly(&mut cmd).map_err(|e| format!("apt-get {}: {e}", args.join(" ")))
}

fn run_quietly(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = last[last.len().saturating_sub(3)..].join(" | ");
    Err(format!("{} ({tail})", out.status))
}
