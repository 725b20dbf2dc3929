//! The provider modes whose lie depends on circumstance: the size of the
//! body, how many conditional writes a key has had, the form of the ETag,
//! or the moment a refused write takes effect. Each is applied here, next
//! to nothing else, so the honest path in `http.rs` reads as S3 does.

use std::collections::BTreeMap;
use std::sync::Mutex;

use bytes::Bytes;

use super::failure::S3Failure;
use super::{FakeS3, ObjectRequest, lock};
use crate::fake_s3::faults::OpKind;
use crate::fake_s3::mode::{CONDITIONS_PER_KEY, LARGE_BODY_BYTES, ProviderMode};
use crate::fake_s3::store::{Conditions, Refusal};

/// Conditional writes seen per bucket and key, for
/// `conditions-expire-per-key`.
#[derive(Debug, Default)]
pub(super) struct ConditionalWrites(Mutex<BTreeMap<(String, String), u32>>);

impl ConditionalWrites {
    /// Counts one more conditional write of `bucket`/`key`; returns how
    /// many there have been, this one included.
    fn count(&self, bucket: &str, key: &str) -> u32 {
        let mut counts = lock(&self.0);
        let count = counts.entry((bucket.to_owned(), key.to_owned())).or_default();
        *count = count.saturating_add(1);
        *count
    }
}

/// Whether an `If-Match` value is an ETag without quotes (`*` is neither).
fn is_bare(if_match: &str) -> bool {
    let value = if_match.trim();
    value != "*" && !value.contains('"')
}

impl FakeS3 {
    /// Bends the conditions of a request as the provider mode lies about
    /// them: drops those it ignores, or refuses the request as the mode
    /// would. `body_len` is the request body's size.
    pub(super) fn bend_conditions(
        &self,
        req: &ObjectRequest,
        body_len: usize,
        conditions: &mut Conditions,
    ) -> Result<(), S3Failure> {
        let write = req.op == OpKind::Write;
        let if_match = req.if_match.as_deref();
        match self.inner.mode {
            ProviderMode::LargeBodiesUnconditional if write && body_len > LARGE_BODY_BYTES => {
                *conditions = Conditions::default();
            }
            ProviderMode::ConditionsExpirePerKey if write && conditions.is_conditional() => {
                // Counted here, once per conditional write that reaches the
                // store, whatever the outcome.
                let count = self.inner.conditional_writes.count(&req.bucket, &req.key);
                if count > CONDITIONS_PER_KEY {
                    *conditions = Conditions::default();
                }
            }
            ProviderMode::BareEtagsOnly
                if req.op.is_mutation() && if_match.is_some_and(|value| value.contains('"')) =>
            {
                let refusal = Refusal::PreconditionFailed { header: "If-Match" };
                return Err(S3Failure::from_refusal(&refusal, &req.key));
            }
            ProviderMode::IgnoresBareEtags if write && if_match.is_some_and(is_bare) => conditions.if_match = None,
            _ => {}
        }
        Ok(())
    }

    /// In `applies-refused-late`, a write refused for its condition is
    /// stored anyway, unconditionally, `late_apply_ms` later; the observer
    /// hears of it as a write by `late apply`.
    pub(super) fn apply_refused_later(&self, req: &ObjectRequest, refusal: &Refusal, body: Bytes) {
        let condition_failed = matches!(refusal, Refusal::PreconditionFailed { .. })
            || (*refusal == Refusal::NoSuchKey && req.if_match.is_some());
        if self.inner.mode != ProviderMode::AppliesRefusedLate || req.op != OpKind::Write || !condition_failed {
            return;
        }
        let s3 = self.clone();
        let (bucket, key) = (req.bucket.clone(), req.key.clone());
        let delay = self.inner.faults.late_apply();
        tokio::spawn(async move {
            s3.sleep(delay).await;
            s3.put_direct(&bucket, &key, body, "late apply");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::is_bare;

    #[test]
    fn only_an_unquoted_etag_is_bare() {
        assert!(is_bare("5d41402abc4b2a76b9719d911017c592"));
        assert!(!is_bare("\"5d41402abc4b2a76b9719d911017c592\""));
        assert!(!is_bare("W/\"5d41\""));
        assert!(!is_bare("*"));
    }
}
