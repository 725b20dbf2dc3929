//! Which conditional mutations are in flight at once, for the
//! `409 ConditionalRequestConflict` a provider may answer to overlaps.

use super::*;

/// Undoes an in-flight registration when its request ends, however it
/// ends: a client that hangs up makes hyper drop the request's future.
pub(super) struct InFlight {
    inner: Arc<Inner>,
    key: (String, String),
    sequence: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.inner.in_flight);
        if let Some(set) = in_flight.get_mut(&self.key) {
            set.remove(&self.sequence);
            if set.is_empty() {
                in_flight.remove(&self.key);
            }
        }
    }
}

impl FakeS3 {
    pub(super) fn register_in_flight(&self, req: &ObjectRequest) -> InFlight {
        let key = (req.bucket.clone(), req.key.clone());
        lock(&self.inner.in_flight).entry(key.clone()).or_default().insert(req.sequence);
        InFlight { inner: self.inner.clone(), key, sequence: req.sequence }
    }

    /// Whether a conditional mutation that started before `req` is still in
    /// flight on the same key. Only the earliest of overlapping requests
    /// goes through, so at most one of them can win.
    pub(super) fn overlaps_earlier(&self, req: &ObjectRequest) -> bool {
        let in_flight = lock(&self.inner.in_flight);
        in_flight
            .get(&(req.bucket.clone(), req.key.clone()))
            .and_then(|set| set.first())
            .is_some_and(|&first| first < req.sequence)
    }
}
