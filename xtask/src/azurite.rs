//! Azurite on a loopback port: the Azure Blob Storage emulator the Azure
//! backend's tests run against.
//!
//! [`start`] installs the npm package `azurite` into `.tools/azurite`,
//! starts its blob service in memory on a free `127.0.0.1` port, waits for
//! it to answer and creates one container, signed with the emulator's
//! well-known development key (Azurite checks Shared Key signatures).
//! Dropping the [`Azurite`] stops it.
//!
//! # What this release answers (observed on this setup)
//!
//! - Put Blob honours `If-None-Match: *` and `If-Match`, with 412
//!   `ConditionNotMet`; Delete Blob honours `If-Match`.
//! - It checks Shared Key signatures, so a wrong key is refused with 403
//!   `AuthenticationFailed`, as Azure does.
//! - Its canonical resource for path-style URLs names the account twice
//!   (`/devstoreaccount1/devstoreaccount1/container`), as the SDKs sign it.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, SystemTime};

use hmac::{KeyInit, Mac};

use crate::s3_server::{free_ports, http_with_headers, now};

/// The release the notes above were observed on.
pub const AZURITE_VERSION: &str = "3.35.0";

/// The development account every Azure emulator serves, and its published
/// key.
pub const ACCOUNT: &str = "devstoreaccount1";
const ACCOUNT_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running Azurite blob service with one container.
#[derive(Debug)]
pub struct Azurite {
    /// `http://127.0.0.1:PORT`, without the account.
    pub endpoint: String,
    pub container: String,
    child: Child,
}

impl Azurite {
    /// The settings as environment variables: the tests' names, and the
    /// ones `object_store`'s Azure chain reads to use the emulator.
    pub fn env(&self) -> [(&'static str, &str); 5] {
        [
            ("AZURE_STORAGE_USE_EMULATOR", "true"),
            ("HOPLOCK_AZURE_CONTAINER", &self.container),
            ("AZURITE_BLOB_STORAGE_URL", &self.endpoint),
            ("HOPLOCK_AZURE_ENDPOINT", &self.endpoint),
            ("HOPLOCK_AZURE_ACCOUNT", ACCOUNT),
        ]
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Installs Azurite if needed and starts it.
pub fn start(root: &Path) -> Result<Azurite, String> {
    let prefix = root.join(".tools").join("azurite");
    let binary = prefix.join("node_modules").join(".bin").join("azurite-blob");
    let manifest = prefix.join("node_modules").join("azurite").join("package.json");
    let installed = std::fs::read_to_string(&manifest)
        .is_ok_and(|text| text.contains(&format!("\"version\": \"{AZURITE_VERSION}\"")));
    if !installed {
        eprintln!("installing azurite@{AZURITE_VERSION} from npm into {}", prefix.display());
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix"])
            .arg(&prefix)
            .arg(format!("azurite@{AZURITE_VERSION}"))
            .status()
            .map_err(|err| format!("could not run npm (Node.js is needed for Azurite): {err}"))?;
        if !status.success() {
            return Err(format!("npm install azurite@{AZURITE_VERSION} failed ({status})"));
        }
    }
    let [port] = free_ports::<1>()?;
    let child = Command::new(&binary)
        .args(["--inMemoryPersistence", "--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
        .args(["--disableTelemetry", "--skipApiVersionCheck", "--silent"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| format!("could not start {}: {err}", binary.display()))?;
    let mut azurite =
        Azurite { endpoint: format!("http://127.0.0.1:{port}"), container: "hoplock-azure".into(), child };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = azurite.child.try_wait() {
            return Err(format!("Azurite exited ({status}) before it answered"));
        }
        match create_container(addr, &azurite.container) {
            Ok(201 | 409) => return Ok(azurite),
            Ok(status) => {
                return Err(format!("Azurite refused to create container {}: HTTP {status}", azurite.container));
            }
            Err(_) if now() < deadline => thread::sleep(Duration::from_millis(200)),
            Err(err) => return Err(format!("Azurite did not answer within {} s: {err}", START_TIMEOUT.as_secs())),
        }
    }
}

/// Creates `container` with a request signed by the development key.
#[expect(clippy::disallowed_methods, reason = "the request's x-ms-date is the real wall clock's")]
fn create_container(addr: SocketAddr, container: &str) -> io::Result<u16> {
    let date = hoplock::s3::xml::format_http_date(SystemTime::now());
    let version = "2021-08-06";
    let string_to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{ACCOUNT}/{ACCOUNT}/{container}\nrestype:container"
    );
    let key = base64_decode(ACCOUNT_KEY).ok_or_else(|| io::Error::other("the development key is not base64"))?;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).map_err(io::Error::other)?;
    mac.update(string_to_sign.as_bytes());
    let signature = base64_encode(&mac.finalize().into_bytes());
    let authorization = format!("SharedKey {ACCOUNT}:{signature}");
    let headers = [("x-ms-date", date.as_str()), ("x-ms-version", version), ("Authorization", authorization.as_str())];
    http_with_headers(addr, "PUT", &format!("/{ACCOUNT}/{container}?restype=container"), &headers, b"")
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut bits, mut count) = (0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        bits = bits << 6 | ALPHABET.iter().position(|&a| a == c)? as u32;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_dates_are_http_dates() {
        assert_eq!(base64_encode(b"hoplock!"), "aG9wbG9jayE=");
        assert_eq!(base64_decode("aG9wbG9jayE=").as_deref(), Some(&b"hoplock!"[..]));
        assert_eq!(base64_decode(ACCOUNT_KEY).map(|key| key.len()), Some(64));
        assert_eq!(
            hoplock::s3::xml::format_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_537_681)),
            "Sun, 06 Dec 2026 06:14:41 GMT"
        );
    }
}
