//! The keys in hand, and their refresh in the background.
//!
//! Requests never wait on a refresh. The first request waits for the first
//! keys (there is nothing to sign with before them); after that a
//! background task fetches new keys ahead of expiry and swaps them in.
//! Requests keep signing with the keys in hand until then, and once those
//! have expired they fail at once as a passing error, so an elector's
//! timing is never held up by a slow credential source.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use tracing::{debug, info, warn};

use super::providers::{FetchError, Fetched, Provider};
use crate::backend::BackendError;
use crate::clock::Clock;
use crate::s3::sigv4::Signer;
use crate::s3::transport::HttpTransport;

/// Refresh this long before expiry at least...
const REFRESH_LEAD: Duration = Duration::from_secs(5 * 60);
/// ...and retry a failed refresh after at most this long.
const RETRY_CAP: Duration = Duration::from_secs(60);

/// The keys in hand for one backend, and where new ones come from.
pub(crate) struct CredentialCache {
    provider: Provider,
    region: String,
    http: Arc<dyn HttpTransport>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Held while the first keys are fetched, so concurrent first requests
    /// make one fetch.
    first: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    current: Option<Current>,
    refresher_started: bool,
    /// The last refresh failure, until a refresh succeeds.
    last_error: Option<FetchError>,
}

struct Current {
    signer: Arc<Signer>,
    fetched: SystemTime,
    expires: Option<SystemTime>,
}

impl std::fmt::Debug for CredentialCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialCache").field("source", &self.provider).finish_non_exhaustive()
    }
}

/// When keys fetched at `fetched` that expire at `expires` are refreshed:
/// five minutes ahead, or when a quarter of their lifetime is left if that
/// comes first, but never before half of it has passed (so keys that live
/// only minutes are not fetched in a loop).
pub(crate) fn refresh_at(fetched: SystemTime, expires: SystemTime) -> SystemTime {
    let lifetime = expires.duration_since(fetched).unwrap_or_default();
    let lead = REFRESH_LEAD.max(lifetime / 4).min(lifetime / 2);
    expires.checked_sub(lead).unwrap_or(fetched)
}

impl CredentialCache {
    /// A cache for `provider`. Keys known up front are in hand at once, so
    /// a bad access key id is reported here rather than on every request.
    pub(crate) fn new(
        provider: Provider,
        region: String,
        http: Arc<dyn HttpTransport>,
        clock: Arc<dyn Clock>,
    ) -> Result<CredentialCache, BackendError> {
        let mut state = State::default();
        if let Provider::Static { credentials, .. } = &provider {
            let signer = Signer::new(credentials.clone(), region.clone())
                .map_err(|err| BackendError::Config(format!("cannot sign requests: {err}")))?;
            state.current = Some(Current { signer: Arc::new(signer), fetched: clock.wall(), expires: None });
        }
        Ok(CredentialCache { provider, region, http, clock, state: Mutex::new(state), first: Default::default() })
    }

    /// Whether these keys can be replaced by fresh ones.
    pub(crate) fn refreshes(&self) -> bool {
        self.provider.refreshes()
    }

    /// Where the keys come from.
    pub(crate) fn source(&self) -> String {
        self.provider.describe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is replaced whole under the lock, so a panic elsewhere
        // cannot leave it half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A signer with the keys in hand. Waits only for the very first keys.
    pub(crate) async fn signer(self: &Arc<Self>) -> Result<Arc<Signer>, BackendError> {
        if let Some(result) = self.in_hand() {
            return result;
        }
        let _first = self.first.lock().await;
        if let Some(result) = self.in_hand() {
            return result;
        }
        match self.provider.fetch(&self.http, &self.clock).await {
            Ok(fetched) => {
                let signer = self.install(fetched)?;
                info!(source = %self.provider.describe(), "S3 credentials obtained");
                self.start_refresher();
                Ok(signer)
            }
            Err(err) => Err(self.unavailable(&err)),
        }
    }

    /// The keys in hand if there are any: `Some(Ok)` while they are valid,
    /// `Some(Err)` once they have expired, `None` before the first fetch.
    fn in_hand(self: &Arc<Self>) -> Option<Result<Arc<Signer>, BackendError>> {
        let now = self.clock.wall();
        let state = self.lock();
        let current = state.current.as_ref()?;
        match current.expires {
            Some(expires) if now >= expires => {
                let error = state.last_error.clone();
                drop(state);
                self.start_refresher();
                Some(Err(match error {
                    Some(err) if err.lasting => self.unavailable(&err),
                    Some(err) => BackendError::Transient(format!(
                        "the S3 credentials from {} expired and the refresh is failing: {}",
                        self.provider.describe(),
                        err.message
                    )),
                    None => BackendError::Transient(format!(
                        "the S3 credentials from {} expired; a refresh is under way",
                        self.provider.describe()
                    )),
                }))
            }
            _ => Some(Ok(current.signer.clone())),
        }
    }

    fn unavailable(&self, err: &FetchError) -> BackendError {
        let message = format!("no S3 credentials from {}: {}", self.provider.describe(), err.message);
        if err.lasting { BackendError::Config(message) } else { BackendError::Transient(message) }
    }

    fn install(&self, fetched: Fetched) -> Result<Arc<Signer>, BackendError> {
        let signer = Arc::new(
            Signer::new(fetched.credentials, self.region.clone())
                .map_err(|err| BackendError::Config(format!("cannot sign requests: {err}")))?,
        );
        let mut state = self.lock();
        state.current = Some(Current { signer: signer.clone(), fetched: self.clock.wall(), expires: fetched.expires });
        state.last_error = None;
        Ok(signer)
    }

    /// Starts the background refresh once, for keys that expire.
    fn start_refresher(self: &Arc<Self>) {
        {
            let mut state = self.lock();
            let expires = state.current.as_ref().is_some_and(|current| current.expires.is_some());
            if state.refresher_started || !expires {
                return;
            }
            state.refresher_started = true;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(refresh_loop(weak));
    }
}

/// Fetches new keys ahead of expiry until the backend is dropped. It holds
/// only a weak reference between attempts, so it never keeps a dropped
/// backend alive.
async fn refresh_loop(weak: Weak<CredentialCache>) {
    let mut failures: u32 = 0;
    loop {
        let (clock, wait) = {
            let Some(cache) = weak.upgrade() else { return };
            let wait = if failures > 0 {
                Duration::from_secs(1 << failures.min(6)).min(RETRY_CAP)
            } else {
                let state = cache.lock();
                let Some(Current { fetched, expires: Some(expires), .. }) = state.current.as_ref() else {
                    return;
                };
                refresh_at(*fetched, *expires).duration_since(cache.clock.wall()).unwrap_or_default()
            };
            (cache.clock.clone(), wait)
        };
        clock.sleep_until(clock.now() + wait).await;
        let Some(cache) = weak.upgrade() else { return };
        match cache.provider.fetch(&cache.http, &cache.clock).await {
            Ok(fetched) => {
                let expires = fetched.expires;
                match cache.install(fetched) {
                    Ok(_) => {
                        failures = 0;
                        debug!(source = %cache.provider.describe(), ?expires, "S3 credentials refreshed");
                    }
                    Err(err) => {
                        failures += 1;
                        warn!(error = %err, "refreshed S3 credentials cannot sign; keeping the old ones");
                    }
                }
            }
            Err(err) => {
                failures += 1;
                warn!(
                    source = %cache.provider.describe(),
                    error = %err.message,
                    "S3 credential refresh failed; requests keep the current keys until they expire"
                );
                cache.lock().last_error = Some(err);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_starts_five_minutes_ahead_or_at_a_quarter_left_and_never_in_a_loop() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |lifetime: u64| refresh_at(t0, t0 + Duration::from_secs(lifetime)).duration_since(t0).unwrap();
        // An hour: a quarter left (15 min) comes before five minutes left.
        assert_eq!(at(3600), Duration::from_secs(2700));
        // Fifteen minutes: five minutes ahead comes first.
        assert_eq!(at(900), Duration::from_secs(600));
        // Two minutes: not before half the lifetime.
        assert_eq!(at(120), Duration::from_secs(60));
        assert_eq!(at(0), Duration::ZERO);
    }
}
