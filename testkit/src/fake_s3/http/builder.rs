//! [`FakeS3Builder`]: a fake S3's provider mode, faults, credentials and
//! buckets, checked before it serves.

use super::*;

/// Why a [`FakeS3`] could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// The faults are out of range.
    #[error(transparent)]
    Faults(#[from] FaultsError),
    /// No credentials were given, so no request could authenticate.
    #[error("the fake S3 needs at least one access key pair")]
    NoCredentials,
    /// A bucket name no S3 client could address: empty, longer than 63
    /// bytes, or holding `/` or a character that is not visible ASCII.
    #[error("{0:?} is not a usable bucket name (1 to 63 visible ASCII characters, no '/')")]
    InvalidBucket(String),
}

/// Configures a [`FakeS3`].
pub struct FakeS3Builder {
    pub(super) clock: Arc<dyn Clock>,
    pub(super) seed: u64,
    pub(super) mode: ProviderMode,
    pub(super) faults: Faults,
    pub(super) credentials: BTreeMap<String, String>,
    pub(super) buckets: BTreeSet<String>,
    pub(super) observer: Option<Observer>,
    pub(super) virtual_host_domain: Option<String>,
}

impl fmt::Debug for FakeS3Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets stay out of logs: list the key ids only.
        f.debug_struct("FakeS3Builder")
            .field("seed", &self.seed)
            .field("mode", &self.mode)
            .field("faults", &self.faults)
            .field("access_key_ids", &self.credentials.keys().collect::<Vec<_>>())
            .field("buckets", &self.buckets)
            .field("virtual_host_domain", &self.virtual_host_domain)
            .finish_non_exhaustive()
    }
}

impl FakeS3Builder {
    /// How the server treats conditional requests. Default `honest`.
    pub fn mode(mut self, mode: ProviderMode) -> Self {
        self.mode = mode;
        self
    }

    /// The faults to inject. Default none.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Adds an access key pair the server accepts. At least one is needed.
    pub fn credentials(mut self, access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        self.credentials.insert(access_key_id.into(), secret_access_key.into());
        self
    }

    /// Adds a bucket that exists from the start. Others can be created with
    /// a PUT of the bucket, as on S3.
    pub fn bucket(mut self, name: impl Into<String>) -> Self {
        self.buckets.insert(name.into());
        self
    }

    /// Reports every object request to `observer` when it ends.
    pub fn observer(mut self, observer: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Also accepts virtual-host requests: a `Host` of `bucket.<domain>`
    /// (any port) addresses `bucket`. Path-style requests work either way.
    pub fn virtual_host_domain(mut self, domain: impl Into<String>) -> Self {
        self.virtual_host_domain = Some(domain.into().to_ascii_lowercase());
        self
    }

    /// Builds the server.
    pub fn build(self) -> Result<FakeS3, BuildError> {
        self.faults.validate()?;
        if self.credentials.is_empty() {
            return Err(BuildError::NoCredentials);
        }
        let mut store = Store::new();
        match self.mode {
            ProviderMode::StaleReads => store.set_history_retention(self.faults.stale_read_window()),
            ProviderMode::LaggingReads => store.set_history_retention(self.faults.read_lag()),
            _ => {}
        }
        store.set_weak_etags(self.mode == ProviderMode::WeakEtags);
        for bucket in &self.buckets {
            // Looser than the rules for new buckets (`valid_bucket_name`):
            // the buckets given here stand for existing ones, and old
            // buckets may have names S3 no longer hands out.
            let usable = (1..=63).contains(&bucket.len()) && bucket.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
            if !usable {
                return Err(BuildError::InvalidBucket(bucket.clone()));
            }
            store.create_bucket(bucket);
        }
        Ok(FakeS3 {
            inner: Arc::new(Inner {
                store: Mutex::new(store),
                mode: self.mode,
                faults: self.faults,
                credentials: self.credentials.into_iter().map(|(id, secret)| (id, Verifier::new(secret))).collect(),
                clock: self.clock,
                rng: Mutex::new(Rng::new(self.seed)),
                observer: self.observer,
                in_flight: Mutex::new(BTreeMap::new()),
                next_sequence: AtomicU64::new(0),
                virtual_host_domain: self.virtual_host_domain,
                outage_until: Mutex::new(None),
                conditional_writes: lies::ConditionalWrites::default(),
            }),
        })
    }
}
