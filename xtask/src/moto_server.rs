//! The moto server on a loopback port: the AWS STS the credential tests
//! assume roles against, and an S3 that accepts the temporary keys STS hands
//! out.
//!
//! [`start`] installs moto from PyPI (`moto[server]`) into `.tools/moto`,
//! starts `python3 -m moto.server` on a free `127.0.0.1` port, waits for it
//! to answer and creates one bucket. Dropping the [`MotoServer`] stops it.
//!
//! # What moto 5.2.5 answers (observed on this setup)
//!
//! - STS `AssumeRole` and `AssumeRoleWithWebIdentity` (form-encoded POST to
//!   `/`) answer with fresh random keys each call and an `Expiration` of now
//!   plus `DurationSeconds`, which it takes as low as 30 s (AWS's floor is
//!   900 s). It checks no signature and no web identity token.
//! - S3 checks no signature either, so it cannot stand in for SeaweedFS in
//!   the authentication tests. It honours `If-None-Match: *` (412 on an
//!   existing key) and `If-Match` (412 when stale, 404 on a missing key) on
//!   sequential PUTs; a bucket is created with an unsigned `PUT /bucket`.
//! - It starts answering in 2 to 4 s on two shared cores.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use crate::s3_server::{free_ports, http, now, pip_install};

/// The moto release the notes above were observed on.
pub const MOTO_VERSION: &str = "5.2.5";

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running moto server with one S3 bucket.
#[derive(Debug)]
pub struct MotoServer {
    /// `http://127.0.0.1:PORT`, for STS and for path-style S3 alike.
    pub endpoint: String,
    pub bucket: String,
    child: Child,
}

impl MotoServer {
    /// The settings as environment variables, in the names the tests read.
    pub fn env(&self) -> [(&'static str, &str); 2] {
        [("HOPLOCK_MOTO_ENDPOINT", &self.endpoint), ("HOPLOCK_MOTO_BUCKET", &self.bucket)]
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        // moto keeps everything in memory; there is nothing to flush.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Installs moto if needed and starts it.
pub fn start(root: &Path) -> Result<MotoServer, String> {
    let package = format!("moto[server]=={MOTO_VERSION}");
    let marker = format!("moto-{MOTO_VERSION}.dist-info");
    let target = pip_install(root, "moto", &package, &|target| target.join(&marker).is_dir())?;
    let [port] = free_ports::<1>()?;
    let child = Command::new("python3")
        .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
        .env("PYTHONPATH", &target)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| format!("could not start the moto server: {err}"))?;
    let mut server = MotoServer { endpoint: format!("http://127.0.0.1:{port}"), bucket: "hoplock-moto".into(), child };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!("the moto server exited ({status}) before it answered"));
        }
        if http(addr, "GET", "/", b"").is_ok() {
            break;
        }
        if now() >= deadline {
            return Err(format!("the moto server did not answer within {} s", START_TIMEOUT.as_secs()));
        }
        thread::sleep(Duration::from_millis(200));
    }
    // On an error, dropping `server` stops moto again.
    match http(addr, "PUT", &format!("/{}", server.bucket), b"") {
        Ok(200) => Ok(server),
        Ok(status) => Err(format!("moto refused to create bucket {}: HTTP {status}", server.bucket)),
        Err(err) => Err(format!("could not create bucket {} on moto: {err}", server.bucket)),
    }
}
