//! What tests and the simulator do to the store without HTTP: accessors,
//! buckets, the operator's direct writes and deletes, and outages.

use super::*;

impl FakeS3 {
    /// Starts configuring a server that reads time from `clock` and draws
    /// every random choice (faults, latencies, request ids) from `seed`.
    pub fn builder(clock: Arc<dyn Clock>, seed: u64) -> FakeS3Builder {
        FakeS3Builder {
            clock,
            seed,
            mode: ProviderMode::Honest,
            faults: Faults::default(),
            credentials: BTreeMap::new(),
            buckets: BTreeSet::new(),
            observer: None,
            virtual_host_domain: None,
        }
    }

    /// The provider mode.
    pub fn mode(&self) -> ProviderMode {
        self.inner.mode
    }

    /// The injected faults.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// The server's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Creates a bucket. Returns false if it existed.
    pub fn create_bucket(&self, bucket: &str) -> bool {
        lock(&self.inner.store).create_bucket(bucket)
    }

    /// The latest version under `key`, for checks after a run. Ignores the
    /// provider mode (no stale reads) and faults.
    pub fn object(&self, bucket: &str, key: &str) -> Option<Object> {
        lock(&self.inner.store).current(bucket, key).cloned()
    }

    /// Writes `body` under `key` at once and unconditionally, on behalf of
    /// `client`, someone outside the simulated nodes (an operator, another
    /// tool). No faults apply; the observer hears of it like any request.
    pub fn put_direct(&self, bucket: &str, key: &str, body: Bytes, client: &str) -> Option<Object> {
        let now = self.inner.clock.now();
        let wall = self.inner.clock.wall();
        let stored = lock(&self.inner.store).put(bucket, key, body, None, &Conditions::default(), wall).ok()?;
        self.report_direct(OpKind::Write, bucket, key, Some(&stored), client, now);
        Some(stored)
    }

    /// Refuses every object request that reaches the store within the next
    /// `duration`, applying nothing: an outage, as a region or an
    /// overloaded prefix has them. `status` is the answer: 503 SlowDown (as
    /// AWS throttles), 429 TooManyRequests (as several S3-compatible
    /// providers do) or 500 InternalError.
    ///
    /// # Errors
    ///
    /// Any other status is refused: the fake S3 would not know what it
    /// means.
    pub fn outage(&self, duration: Duration, status: u16) -> Result<(), UnknownOutageStatus> {
        if !OUTAGE_STATUSES.contains(&status) {
            return Err(UnknownOutageStatus(status));
        }
        let until = self.inner.clock.now() + duration;
        *lock(&self.inner.outage_until) = Some((until, status));
        Ok(())
    }

    /// The status every request gets now, during an outage.
    pub(super) fn outage_status(&self) -> Option<u16> {
        let outage = *lock(&self.inner.outage_until);
        outage.and_then(|(until, status)| (self.inner.clock.now() < until).then_some(status))
    }

    /// Deletes `key` at once and unconditionally, on behalf of `client`.
    pub fn delete_direct(&self, bucket: &str, key: &str, client: &str) {
        let now = self.inner.clock.now();
        let wall = self.inner.clock.wall();
        let removed = lock(&self.inner.store).delete(bucket, key, &Conditions::default(), wall).ok().flatten();
        self.report_direct(OpKind::Delete, bucket, key, removed.as_ref(), client, now);
    }

    pub(super) fn report_direct(
        &self,
        op: OpKind,
        bucket: &str,
        key: &str,
        object: Option<&Object>,
        client: &str,
        at: Instant,
    ) {
        let Some(observer) = &self.inner.observer else { return };
        observer(&Event {
            request_id: self.request_id(),
            op,
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            if_match: None,
            if_none_match: None,
            outcome: Outcome::Applied,
            etag: object.map(|object| object.etag().to_owned()),
            body: if op == OpKind::Write { object.map(|object| object.body().clone()) } else { None },
            client: Some(client.to_owned()),
            started: at,
            applied_at: Some(at),
            ended: at,
        });
    }
}
