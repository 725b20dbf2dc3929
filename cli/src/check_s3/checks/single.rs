//! The one-at-a-time checks: a create of an existing key, a write with a
//! replaced ETag and `If-Match` on a missing key must each be refused and
//! change nothing.
//!
//! Each runs at several body sizes (see [`Run::sizes`]): a gateway that
//! checks conditions only for small bodies, or only for large ones, shows
//! its lie here as "ignores conditions", whatever `--body-bytes` says.

use bytes::Bytes;

use super::{Fatal, Run, SMALL, held, not_supported};
use crate::check_s3::probe::{Answer, Condition, body};
use crate::check_s3::report::{Check, Status, Verdict};

/// A body size every run checks besides the small one and `--body-bytes`:
/// over 512 KiB, so a store that treats large bodies apart shows it at any
/// `--body-bytes`, and under the 1 MiB a read-back may return whole from a
/// store that ignores `Range`.
pub const LARGE: usize = 512 * 1024 + 512;

/// The size `--thorough` adds: over 5 MiB, past the part size where some
/// gateways switch to a multipart path of their own.
pub const HUGE: usize = 6 * 1024 * 1024;

impl Run<'_> {
    /// The body sizes of the one-at-a-time checks, smallest first.
    pub(super) fn sizes(&self) -> Vec<usize> {
        let mut sizes = vec![SMALL, self.settings.body_bytes, LARGE];
        if self.settings.thorough {
            sizes.push(HUGE);
        }
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    fn sized(&self, name: &str, id: u64, size: usize) -> Bytes {
        body(&self.report.prefix, name, id, size)
    }

    /// Returns whether a create of a missing key succeeded.
    pub(super) async fn create(&mut self) -> Result<bool, Fatal> {
        const NAME: &str = "create";
        self.begin(NAME);
        let mut rounds = Vec::new();
        for size in self.sizes() {
            let name = format!("create-{size}");
            let first = self.put(&name, &Condition::Absent, self.sized(&name, 1, size)).await?;
            if not_supported(&first) {
                self.push(Check::not_supported(
                    NAME,
                    format!("If-None-Match: * on a missing key: {}", first.describe()),
                ));
                return Ok(false);
            }
            if !first.succeeded() {
                let what = format!("If-None-Match: * on a missing key ({size} B): {}", first.describe());
                self.push(refused_or_not_judged(NAME, &first, what));
                return Ok(false);
            }
            let second = self.put(&name, &Condition::Absent, self.sized(&name, 2, size)).await?;
            rounds.push((size, name, first, second));
        }
        self.probe.pause(self.lag.wait()).await;
        if let Some((_, _, _, conflict)) = rounds.iter().find(|(_, _, _, second)| second.status == Some(409)) {
            let what = format!(
                "If-None-Match: * on an existing key answered {}: this store says \"exists\" with 409 where AWS says \
                 412 (on AWS a 409 means another conditional write was in flight); hoplock takes either as a lost race",
                conflict.describe()
            );
            self.finding("409 on a create", what);
        }
        let mut checks = Vec::new();
        for (size, name, first, second) in rounds {
            let (stored, _) = self.settled_now(&name, Some(1)).await?;
            let evidence = format!(
                "{size} B: missing key {}, existing key {}, object holds {}",
                first.describe(),
                second.describe(),
                held(stored)
            );
            let outcome = Refusal { answer: &second, took_effect: stored == Some(2), unchanged: stored == Some(1) };
            checks.push(outcome.judge(
                NAME,
                Verdict::IgnoresConditions,
                "a create of an existing key took effect",
                evidence,
            ));
        }
        self.push(worst(NAME, checks));
        Ok(true)
    }

    /// Returns whether a write with the current ETag succeeded.
    pub(super) async fn compare_and_swap(&mut self) -> Result<bool, Fatal> {
        const NAME: &str = "compare-and-swap";
        self.begin(NAME);
        let mut rounds = Vec::new();
        for size in self.sizes() {
            let name = format!("cas-{size}");
            let base = self.put(&name, &Condition::None, self.sized(&name, 10, size)).await?;
            let Some(first) = base.etag.clone().filter(|_| base.succeeded()) else {
                self.push(Check::skipped(NAME, format!("could not write the object to swap: {}", base.describe())));
                return Ok(false);
            };
            let current = self.put(&name, &Condition::Matches(first.clone()), self.sized(&name, 11, size)).await?;
            if not_supported(&current) {
                let why = format!("If-Match with the current ETag: {}", current.describe());
                self.push(Check::not_supported(NAME, why));
                return Ok(false);
            }
            if !current.succeeded() {
                let what = format!("If-Match with the current ETag {first} ({size} B): {}", current.describe());
                self.push(refused_or_not_judged(NAME, &current, what));
                return Ok(false);
            }
            let stale = self.put(&name, &Condition::Matches(first.clone()), self.sized(&name, 12, size)).await?;
            rounds.push((size, name, first, current, stale));
        }
        self.probe.pause(self.lag.wait()).await;
        let mut checks = Vec::new();
        for (size, name, first, current, stale) in rounds {
            let (stored, _) = self.settled_now(&name, Some(11)).await?;
            let second = current.etag.clone().unwrap_or_default();
            let evidence = format!(
                "{size} B: current ETag {first}: {} (new ETag {second}); replaced ETag: {}; object holds {}",
                current.describe(),
                stale.describe(),
                held(stored)
            );
            checks.push(if second == first {
                Check::fail(NAME, Verdict::WeakEtags, format!("different bytes kept the ETag {first} ({evidence})"))
            } else {
                let outcome =
                    Refusal { answer: &stale, took_effect: stored == Some(12), unchanged: stored == Some(11) };
                outcome.judge(NAME, Verdict::IgnoresConditions, "a write with a replaced ETag took effect", evidence)
            });
        }
        self.push(worst(NAME, checks));
        Ok(true)
    }

    pub(super) async fn missing_key(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "if-match on a missing key";
        self.begin(NAME);
        let nowhere = {
            use hoplock::entropy::Entropy as _;
            let entropy = hoplock::entropy::OsEntropy;
            format!("\"{:016x}{:016x}\"", entropy.next_u64(), entropy.next_u64())
        };
        let mut rounds = Vec::new();
        for size in self.sizes() {
            let name = format!("missing-{size}");
            let answer = self.put(&name, &Condition::Matches(nowhere.clone()), self.sized(&name, 20, size)).await?;
            rounds.push((size, name, answer));
        }
        self.probe.pause(self.lag.wait()).await;
        let mut checks = Vec::new();
        let mut statuses = Vec::new();
        for (size, name, answer) in rounds {
            let (stored, _) = self.settled_now(&name, None).await?;
            statuses.push(answer.describe());
            let evidence =
                format!("{size} B: If-Match {nowhere}: {}; key afterwards: {}", answer.describe(), held(stored));
            let outcome = Refusal { answer: &answer, took_effect: stored.is_some(), unchanged: stored.is_none() };
            checks.push(outcome.judge(NAME, Verdict::IgnoresConditions, "the write created the key", evidence));
        }
        self.push(worst(NAME, checks));
        statuses.dedup();
        let meaning = match statuses.first().map(String::as_str) {
            Some(status) if status.starts_with("404") => "404, as AWS answers",
            Some(status) if status.starts_with("412") => "412, as Azure, Ceph and Ozone answer; hoplock takes either",
            _ => "neither 404 nor 412",
        };
        self.finding("If-Match on a missing key", format!("{} ({meaning})", statuses.join(", ")));
        Ok(())
    }
}

/// A write that should have been refused: its answer, and what reading
/// the object back showed.
pub(super) struct Refusal<'a> {
    pub answer: &'a Answer,
    /// The object holds the write's bytes.
    pub took_effect: bool,
    /// The object holds what it held before.
    pub unchanged: bool,
}

impl Refusal<'_> {
    /// Fails with `verdict` if the write succeeded or its bytes landed
    /// anyway; passes if it was refused (412, 409, 404) and the object is
    /// unchanged; a loud refusal of the condition is "not supported", and
    /// anything else (a 5xx, no answer, a changed object) is inconclusive.
    pub fn judge(&self, name: &'static str, verdict: Verdict, what: &str, evidence: String) -> Check {
        if self.answer.succeeded() || self.took_effect {
            Check::fail(name, verdict, format!("{what} ({evidence})"))
        } else if not_supported(self.answer) {
            Check::not_supported(name, evidence)
        } else if self.answer.refused() && self.unchanged {
            Check::pass(name, evidence)
        } else {
            Check::skipped(name, format!("not judged: inconclusive: {evidence}"))
        }
    }
}

/// A write that should have succeeded and did not: refused for certain
/// (412, 409, 404), the store cannot be used (UNSUPPORTED); anything else
/// (no answer, a 5xx, throttling) says nothing, so the check is not judged.
fn refused_or_not_judged(name: &'static str, answer: &Answer, what: String) -> Check {
    if answer.refused() {
        Check::fail(name, Verdict::Unsupported, format!("{what}: refused"))
    } else {
        Check::skipped(name, format!("not judged: {what}"))
    }
}

/// One check out of its results at each size: the first failure, else a
/// loud refusal, else an inconclusive size, else a pass; the evidence of
/// every size either way.
fn worst(name: &'static str, checks: Vec<Check>) -> Check {
    let rank = |check: &Check| match check.status {
        Status::Fail => 0,
        Status::NotSupported => 1,
        Status::Skipped => 2,
        Status::Pass => 3,
    };
    let evidence: Vec<String> = checks.iter().map(|check| check.evidence.clone()).collect();
    // Among failures, the verdict that wins the report's order comes first.
    let Some(worst) = checks.into_iter().min_by_key(|check| (rank(check), check.verdict.unwrap_or(Verdict::Error)))
    else {
        return Check::skipped(name, "not judged: no body size was checked");
    };
    Check { evidence: evidence.join("; "), ..worst }
}
