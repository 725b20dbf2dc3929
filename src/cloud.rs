//! What the GCS and Azure backends share: sending one request under a
//! deadline through the transport seam, reading credentials from
//! `object_store`'s chains, and mapping a request that got no answer.
//!
//! `object_store` finds credentials the way the clouds' SDKs do, and signs
//! Azure's Shared Key requests. It does not send the backends' requests:
//! its client retries timeouts and server errors on its own, its GCS writes
//! go through the XML API, and its deletes carry no condition. A retried
//! conditional write after a lost reply can come back as a lost race
//! although the first attempt landed, so every request here is sent once,
//! through [`HttpTransport`], and an unknown outcome stays
//! [`BackendError::Ambiguous`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};

use crate::backend::BackendError;
use crate::clock::{Clock, Instant};
use crate::transport::{HttpTransport, ReqwestTransport, TransportError, TransportErrorKind};

/// How one request failed before any status could be mapped.
pub(crate) enum Failure {
    /// No credentials to send with; nothing was sent.
    Credentials(BackendError),
    /// The transport gave up.
    Transport(TransportError),
    /// No answer before the deadline.
    Timeout,
}

/// Maps a request that got no answer. A write that may have been sent has
/// an unknown outcome; a read that failed is worth another try.
pub(crate) fn failure_to_error(failure: Failure, is_write: bool, store: &str) -> BackendError {
    match failure {
        Failure::Credentials(err) => err,
        Failure::Transport(err) => match err.kind {
            TransportErrorKind::Config => BackendError::Config(format!("cannot form a request to {store}: {err}")),
            TransportErrorKind::Connect => {
                BackendError::Transient(format!("cannot reach {store} (nothing was sent): {err}"))
            }
            TransportErrorKind::Io if is_write => {
                BackendError::Ambiguous(format!("the connection to {store} failed after sending: {err}"))
            }
            TransportErrorKind::Io => BackendError::Transient(format!("the connection to {store} failed: {err}")),
        },
        Failure::Timeout if is_write => BackendError::Ambiguous(format!("no answer from {store} in time")),
        Failure::Timeout => BackendError::Transient(format!("no answer from {store} in time")),
    }
}

/// Sends `request` once, giving up at `deadline`.
pub(crate) async fn send_once(
    transport: &dyn HttpTransport,
    clock: &dyn Clock,
    request: Request<Bytes>,
    deadline: Instant,
) -> Result<Response<Bytes>, Failure> {
    tokio::select! {
        biased;
        result = transport.send(request) => result.map_err(Failure::Transport),
        () = clock.sleep_until(deadline) => Err(Failure::Timeout),
    }
}

/// Fetches a credential from an `object_store` provider, giving up at
/// `deadline`.
///
/// Until the first credential arrives, a failure is a configuration error
/// that says where credentials were looked for: a process that never had
/// credentials will not get them by waiting. After that, a failure is a
/// passing one (a token refresh that failed once), since the source worked
/// before.
pub(crate) async fn credential<T: Send + Sync + std::fmt::Debug + 'static>(
    provider: &Arc<dyn object_store::CredentialProvider<Credential = T>>,
    clock: &dyn Clock,
    deadline: Instant,
    had_one: &AtomicBool,
    sources: &str,
) -> Result<Arc<T>, BackendError> {
    let outcome = tokio::select! {
        biased;
        result = provider.get_credential() => result.map_err(|err| err.to_string()),
        () = clock.sleep_until(deadline) => Err("no answer in time".to_string()),
    };
    match outcome {
        Ok(credential) => {
            had_one.store(true, Ordering::Relaxed);
            Ok(credential)
        }
        Err(why) if had_one.load(Ordering::Relaxed) => {
            Err(BackendError::Transient(format!("refreshing the credentials failed: {why}")))
        }
        Err(why) => Err(BackendError::Config(format!("no credentials found (looked in {sources}): {why}"))),
    }
}

/// Lets `object_store`'s credential providers (token exchanges, the
/// metadata servers) use the same HTTP client as the backend, with its
/// proxy and extra CA certificates.
#[derive(Debug)]
pub(crate) struct Connector(pub(crate) ReqwestTransport);

impl object_store::client::HttpConnector for Connector {
    fn connect(
        &self,
        _options: &object_store::ClientOptions,
    ) -> object_store::Result<object_store::client::HttpClient> {
        Ok(object_store::client::HttpClient::new(self.0.client().clone()))
    }
}

/// Credential fetches (a token exchange, a metadata server) are retried at
/// most once and never for long: a process without credentials must say so
/// within seconds.
pub(crate) fn credential_retries() -> object_store::RetryConfig {
    object_store::RetryConfig { max_retries: 1, retry_timeout: Duration::from_secs(3), ..Default::default() }
}

/// What a request was for: a refusal means different things for a read
/// than for a write or delete, whose 5xx may come after it was applied.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
    Delete,
}

/// Runs `read` until it succeeds, fails for good, or `deadline` passes,
/// with jittered backoff between tries so readers that failed together
/// drift apart. Only passing failures are tried again.
pub(crate) async fn read_with_retries<T, F, Fut>(
    clock: &dyn Clock,
    entropy: &dyn crate::entropy::Entropy,
    deadline: Instant,
    mut read: F,
) -> Result<T, BackendError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BackendError>>,
{
    let mut attempt = 0u32;
    loop {
        match read().await {
            Err(error @ BackendError::Transient(_)) if clock.now() < deadline => {
                attempt += 1;
                let base = Duration::from_millis(50).saturating_mul(1 << attempt.min(5)).min(Duration::from_secs(1));
                let pause = base * (500 + (entropy.next_u64() % 1000) as u32 / 2) / 1000;
                clock.sleep_until((clock.now() + pause).min(deadline)).await;
                if clock.now() >= deadline {
                    return Err(error);
                }
            }
            result => return result,
        }
    }
}

/// Percent-encodes one path component or query value: everything but
/// RFC 3986's unreserved characters, so `/` in an object name is `%2F`.
pub(crate) fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Percent-encodes a path whose `/` separators stay as they are (an Azure
/// blob name).
#[cfg(feature = "azure")]
pub(crate) fn encode_path(text: &str) -> String {
    text.split('/').map(encode_component).collect::<Vec<_>>().join("/")
}
