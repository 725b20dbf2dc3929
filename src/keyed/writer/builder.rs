//! [`KeyedWriterBuilder`]: a member's settings, checked against each other before
//! anything is read or written.

use super::*;

/// Builds a [`KeyedWriter`]. Every timing setting has the elector's default
/// and the same rule: renew interval + request timeout + stop margin must be
/// less than TTL·(1−ρ)/(1+ρ).
#[derive(Debug)]
pub struct KeyedWriterBuilder<O> {
    pub(super) store: O,
    pub(super) id: Option<String>,
    pub(super) addr: String,
    pub(super) keys: Vec<String>,
    /// The settings every term holder shares, with their defaults.
    pub(super) term: TermTiming,
    pub(super) read_interval: Option<Duration>,
    pub(super) leave_timeout: Option<Duration>,
    pub(super) hash: Hash,
    pub(super) capacity: NonZeroU32,
    pub(super) create_at: Option<u64>,
    pub(super) adoption: bool,
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) entropy: Option<Arc<dyn Entropy>>,
}

impl<O: ObjectBackend> KeyedWriterBuilder<O> {
    crate::term_timing::term_timing_setters!();

    /// This member's id: the name HRW computes ownership from. Required.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Where others can reach this member; stored, never weighed.
    pub fn addr(mut self, addr: impl Into<String>) -> Self {
        self.addr = addr.into();
        self
    }

    /// The keys to share out. Every member must be given the same keys;
    /// duplicates count once.
    pub fn keys<K: Into<String>>(mut self, keys: impl IntoIterator<Item = K>) -> Self {
        self.keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// How often the member reads the object (default: the renew
    /// interval). Shorter moves keys sooner after a leave or a crash, for
    /// more reads.
    pub fn read_interval(mut self, interval: Duration) -> Self {
        self.read_interval = Some(interval);
        self
    }

    /// How long a graceful leave tries to remove the entry (default TTL/3).
    pub fn leave_timeout(mut self, timeout: Duration) -> Self {
        self.leave_timeout = Some(timeout);
        self
    }

    /// How long the new owners of an evicted member's keys wait before
    /// starting them (default zero).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.term.lock_delay = delay;
        self
    }

    /// The HRW weight function for a new membership object (default
    /// [`WeightFn::Fast`]). A member refuses to join an object that uses
    /// another.
    pub fn weight_fn(mut self, weight_fn: WeightFn) -> Self {
        self.hash.function = weight_fn;
        self
    }

    /// Makes this member's share of keys proportional to `capacity`, in a
    /// weighted object. Every member of a weighted object must say so; the
    /// capacity is fixed for the entry's life.
    pub fn capacity(mut self, capacity: NonZeroU32) -> Self {
        self.hash.weighted = true;
        self.capacity = capacity;
        self
    }

    /// Lets this member create the membership object, with views from
    /// `view` (at least 1), when it finds none and has seen none. By
    /// default it never creates one: a missing object fails closed, and the
    /// member reads again until someone who may creates it.
    ///
    /// A process cannot tell a group that never had an object from one
    /// whose object was deleted, and the views of a recreated object are
    /// the rounds of its keys. Give `create_at(1)` to the members of a new
    /// group only; after a deletion, give one process a view above the last
    /// view any member saw (the highest round a downstream accepted), so
    /// rounds keep rising for fenced downstreams. The creator adopts no view
    /// for one TTL after the creation, so members of a deleted object that
    /// had not noticed yet have stopped before any key starts again.
    ///
    /// ```
    /// use std::time::Duration;
    /// use hoplock::backend::memory::MemoryBackend;
    /// use hoplock::keyed::KeyedWriter;
    ///
    /// // The object was deleted after view 4_211: start above it.
    /// let writer = KeyedWriter::builder(MemoryBackend::new())
    ///     .id("worker-1")
    ///     .keys(["orders"])
    ///     .ttl(Duration::from_secs(30))
    ///     .create_at(5_000)
    ///     .build()
    ///     .expect("a valid configuration");
    /// # drop(writer);
    /// ```
    pub fn create_at(mut self, view: u64) -> Self {
        self.create_at = Some(view);
        self
    }

    /// Turns off the wait for adoption (feature `testing` only): a member
    /// then starts every key HRW gives it over its own newest list, as
    /// membership that fails open does. The simulator uses it to show the
    /// two writers that follow.
    #[cfg(any(test, feature = "testing"))]
    pub fn adoption(mut self, on: bool) -> Self {
        self.adoption = on;
        self
    }

    /// The clock (default: the system's).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The source of nonces and incarnation ids (default: the OS).
    pub fn entropy(mut self, entropy: Arc<dyn Entropy>) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Checks the configuration and builds the writer. Nothing is read or
    /// written until [`KeyedWriter::run`].
    pub fn build(self) -> Result<KeyedWriter<O>, KeyedError> {
        let config = |message: String| Err(KeyedError::Config(message));
        let Some(id) = self.id.clone() else { return config("a member needs an id".into()) };
        if id.is_empty() || id.len() > MAX_OWNER_BYTES {
            return config(format!("the member id must be 1..={MAX_OWNER_BYTES} bytes"));
        }
        if id == super::super::RESET_ENTRY_ID {
            return config(format!("the member id {id:?} is the placeholder a membership reset writes"));
        }
        let timing = self.timing()?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
        let entropy = self.entropy.unwrap_or_else(|| Arc::new(OsEntropy));
        let mut keys = self.keys;
        keys.sort();
        keys.dedup();
        let me = Identity {
            id: id.clone(),
            addr: self.addr,
            capacity: self.capacity,
            hash: self.hash,
            create_at: self.create_at,
            adoption: self.adoption,
        };
        let core = Core::new(timing, me, new_incarnation(&id, entropy.as_ref()), keys.into());
        Ok(KeyedWriter {
            store: self.store,
            shared: Arc::new(Shared { core: Mutex::new(core), clock, id }),
            entropy,
            leave: Arc::new(Leave::default()),
            reported_absent: std::sync::atomic::AtomicBool::new(false),
            #[cfg(feature = "planted")]
            shared_term: watch::channel(Term { cancelled: true, until: Instant::ZERO }).0,
        })
    }

    pub(super) fn timing(&self) -> Result<Timing, KeyedError> {
        let term = &self.term;
        let renew_interval = term.renew_interval();
        let timing = Timing {
            ttl: term.ttl,
            renew_interval,
            read_interval: self.read_interval.unwrap_or(renew_interval),
            request_timeout: term.request_timeout(),
            leave_timeout: self.leave_timeout.unwrap_or(term_timing::default_leave_timeout(term.ttl)),
            drift_bound_ppb: term.drift_bound_ppb(),
            stop_margin: term.stop_margin(),
            lock_delay: term.lock_delay,
        };
        let resolution = self.clock.as_ref().map_or(Duration::from_millis(1), |clock| clock.timer_resolution());
        term.check(
            &[("read interval", timing.read_interval, false)],
            &[("leave timeout", timing.leave_timeout, false)],
            resolution,
        )
        .map_err(KeyedError::Config)?;
        Ok(timing)
    }
}
