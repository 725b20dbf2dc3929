//! The checks `hoplock check-s3` runs, in order: the read lag and the ETag
//! forms first (every later read-back and condition depends on them), the
//! one-at-a-time checks (each condition alone, at several body sizes, then
//! many writes of one key), races, a slow body, a linearizability audit,
//! authentication, a conditional delete, and last the settle pass that
//! reads every key again for refused writes that landed late.
//!
//! Each check records what it sent and what came back as evidence. A check
//! that should fail but succeeded is a failure whatever else happened; a
//! check whose outcome cannot be told (no answer, a 5xx) is settled by
//! reading the object back, and skipped when even that cannot tell.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use hoplock::clock::Clock;

use bytes::Bytes;
use hoplock::BackendError;
use http::Method;

use super::Progress;
use super::probe::{Answer, Condition, Probe, body, lock};
use super::report::{Check, Report, Verdict};
mod audit;
mod forms;
mod lag;
mod long_run;
mod races;
mod single;

use self::lag::ReadLag;
use self::single::Refusal;

/// Bodies of the sequential checks: small, and all of one length, so that
/// only their bytes differ.
pub const SMALL: usize = 512;

/// Bodies of the linearizability audit's writes.
const AUDIT_BYTES: usize = 4096;

/// How a run is shaped.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Rounds per race check.
    pub rounds: u32,
    /// Racing clients per round.
    pub concurrency: u32,
    /// Bytes per racing write.
    pub body_bytes: usize,
    /// How long after the last refused write every key is read again.
    pub settle: Duration,
    /// Whether every check sends `If-Match` ETags bare (`--bare-etags`).
    pub bare_etags: bool,
    /// Whether the one-at-a-time checks also write a body over 5 MiB.
    pub thorough: bool,
}

/// A problem that ends the run: the verdict is ERROR.
pub type Fatal = String;

/// The checks, by name, in the order they run (for the progress line).
pub const NAMES: [&str; 16] = [
    "reach the store",
    "read lag",
    "etag forms",
    "create",
    "compare-and-swap",
    "if-match on a missing key",
    "inverted conditions",
    "etag quality",
    "many writes to one key",
    "racing creates",
    "racing compare-and-swaps",
    "slow-body overtake",
    "linearizability",
    "wrong secret refused",
    "conditional delete",
    "refused writes stay refused",
];

/// Runs every check into `report`.
pub async fn run_all(probe: &Probe, settings: Settings, report: &mut Report, progress: &Progress) -> Result<(), Fatal> {
    let mut run = Run {
        probe,
        settings,
        report,
        progress,
        write_latencies: Vec::new(),
        lag: ReadLag::default(),
        late: Mutex::default(),
    };
    run.reach().await?;
    run.read_lag().await?;
    run.etag_forms().await?;
    let created = run.create().await?;
    let swapped = run.compare_and_swap().await?;
    run.missing_key().await?;
    run.inverted(created, swapped).await?;
    run.etag_quality().await?;
    let unsupported = run.report.checks.iter().any(|check| check.verdict == Some(Verdict::Unsupported));
    if unsupported {
        // Races of refused requests prove nothing: say so rather than fail.
        for name in [
            "many writes to one key",
            "racing creates",
            "racing compare-and-swaps",
            "slow-body overtake",
            "linearizability",
        ] {
            run.report.checks.push(Check::skipped(name, "conditional writes are refused"));
        }
    } else {
        run.long_run().await?;
        run.race_creates().await?;
        run.race_swaps().await?;
        run.slow_body().await?;
        run.linearizability().await?;
    }
    run.wrong_secret().await?;
    run.conditional_delete().await?;
    run.refused_stay_refused().await?;
    run.latency();
    Ok(())
}

struct Run<'a> {
    probe: &'a Probe,
    settings: Settings,
    report: &'a mut Report,
    progress: &'a Progress,
    /// Round trips of conditional writes, for the latency finding.
    write_latencies: Vec<Duration>,
    /// The store's read lag, measured first: read-backs wait it out.
    lag: ReadLag,
    /// Reads that showed a write the store had refused.
    late: Mutex<Vec<String>>,
}

/// A conditional request refused loudly: 501, or 400 NotImplemented.
fn not_supported(answer: &Answer) -> bool {
    answer.status == Some(501) || (answer.status == Some(400) && answer.code == "NotImplemented")
}

impl Run<'_> {
    fn begin(&self, name: &str) {
        let index = NAMES.iter().position(|known| *known == name).map_or(0, |i| i + 1);
        self.progress.check(index, NAMES.len(), name);
    }

    fn push(&mut self, check: Check) {
        self.report.checks.push(check);
    }

    fn finding(&mut self, name: &'static str, value: impl Into<String>) {
        self.report.findings.push((name, value.into()));
    }

    /// Ends the run if `answer` says the configuration is wrong (a wrong
    /// secret, a missing bucket, a denied permission): nothing else can be
    /// learned then.
    fn settle(&self, answer: &Answer, write: bool) -> Result<(), Fatal> {
        match self.probe.meaning(answer, write) {
            Some(BackendError::Config(message)) => Err(message),
            _ => Ok(()),
        }
    }

    async fn put(&mut self, name: &str, condition: &Condition, body: Bytes) -> Result<Answer, Fatal> {
        let answer = self.probe.put(0, name, condition, body).await.map_err(|err| err.to_string())?;
        self.settle(&answer, true)?;
        if *condition != Condition::None {
            self.write_latencies.push(answer.latency());
        }
        Ok(answer)
    }

    fn small(&self, tag: &str, id: u64) -> Bytes {
        body(&self.report.prefix, tag, id, SMALL)
    }

    async fn reach(&mut self) -> Result<(), Fatal> {
        self.begin("reach the store");
        let mut evidence = Vec::new();
        for (client, endpoint) in self.report.endpoints.clone().iter().enumerate() {
            let answer = self.probe.get(client, "reach").await.map_err(|err| err.to_string())?;
            let Some(status) = answer.status else {
                return Err(format!("cannot reach {endpoint}: {}", answer.failure.unwrap_or_default()));
            };
            // A 403 AccessDenied for a missing key only means the caller
            // may not list the bucket; the writes will tell more.
            if answer.code != "AccessDenied" {
                self.settle(&answer, false)?;
            }
            if status != 404 && status != 403 {
                return Err(format!("reading a key under a fresh prefix at {endpoint} answered {}", answer.describe()));
            }
            if client == 0
                && let Some(date) = answer.date.as_deref().and_then(hoplock::s3::xml::parse_http_date)
            {
                let skew = match date.duration_since(self.probe.clock().wall()) {
                    Ok(ahead) => ahead.as_secs_f64(),
                    Err(behind) => -behind.duration().as_secs_f64(),
                };
                self.finding("clock skew (server Date minus local)", format!("{skew:+.0} s (SigV4 allows 900 s)"));
            }
            if client == 0 {
                self.report.server.clone_from(&answer.server);
            }
            evidence.push(format!("{endpoint}: {}", answer.describe()));
        }
        self.push(Check::pass("reach the store", evidence.join("; ")));
        Ok(())
    }

    /// Conditions that should hold must not be refused, and support on
    /// GET must not pass for support on PUT: the PUT checks above judge
    /// PUT alone, and what GET and HEAD do is reported here.
    async fn inverted(&mut self, created: bool, swapped: bool) -> Result<(), Fatal> {
        const NAME: &str = "inverted conditions";
        self.begin(NAME);
        let cas = format!("cas-{SMALL}");
        let (_, etag) = self.fresh_read(&cas).await?;
        let mut conditional_reads = Vec::new();
        if let Some(etag) = &etag {
            for method in [Method::GET, Method::HEAD] {
                let condition = Condition::Differs(etag.clone());
                let answer = self
                    .probe
                    .call(0, method.clone(), &cas, &condition, Bytes::new())
                    .await
                    .map_err(|err| err.to_string())?;
                self.settle(&answer, false)?;
                let meaning = if answer.status == Some(304) { "honoured" } else { "ignored" };
                conditional_reads.push(format!("{method} If-None-Match: {} ({meaning})", answer.describe()));
            }
            self.finding("conditional GET and HEAD (304)", conditional_reads.join("; "));
        }
        let check = if created && swapped {
            Check::pass(
                NAME,
                "If-None-Match: * on a missing key and If-Match with the current ETag both succeeded on PUT",
            )
        } else {
            Check::skipped(NAME, "a matching condition on PUT was refused (see above)")
        };
        self.push(check);
        Ok(())
    }

    async fn etag_quality(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "etag quality";
        self.begin(NAME);
        let started = self.probe.clock().now();
        let mut etags: Vec<(u64, String)> = Vec::new();
        for id in 30..36 {
            let answer = self.put("etag", &Condition::None, self.small("etag", id)).await?;
            match answer.etag.clone().filter(|_| answer.succeeded()) {
                Some(etag) => etags.push((id, etag)),
                None => {
                    self.push(Check::skipped(NAME, format!("a plain write failed: {}", answer.describe())));
                    return Ok(());
                }
            }
        }
        let spent = self.probe.clock().now().saturating_duration_since(started);
        let mut by_tag: BTreeMap<&str, u64> = BTreeMap::new();
        let mut clash = None;
        for (id, etag) in &etags {
            if let Some(earlier) = by_tag.insert(etag.as_str(), *id) {
                clash.get_or_insert((earlier, *id, etag.clone()));
            }
        }
        let check = match clash {
            Some((a, b, etag)) => Check::fail(
                NAME,
                Verdict::WeakEtags,
                format!(
                    "writes {a} and {b}, different bytes of {SMALL} bytes each within {} ms, got the same ETag {etag}: \
                     a stale If-Match would match the newer object",
                    spent.as_millis()
                ),
            ),
            None => Check::pass(
                NAME,
                format!(
                    "{} writes of {SMALL} bytes within {} ms got {} distinct ETags",
                    etags.len(),
                    spent.as_millis(),
                    etags.len()
                ),
            ),
        };
        self.push(check);
        Ok(())
    }

    async fn slow_body(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "slow-body overtake";
        self.begin(NAME);
        let base = self.put("slow", &Condition::None, self.small("slow", 1)).await?;
        let Some(etag) = base.etag.clone().filter(|_| base.succeeded()) else {
            self.push(Check::skipped(NAME, format!("could not write the object: {}", base.describe())));
            return Ok(());
        };
        let bytes = self.settings.body_bytes;
        let payload = body(&self.report.prefix, "slow", 2, bytes);
        let request = self
            .probe
            .signed(0, Method::PUT, "slow", &Condition::Matches(etag.clone()), payload)
            .await
            .map_err(|err| err.to_string())?;
        let (open, gate) = tokio::sync::oneshot::channel();
        let held = {
            let probe = self.probe.clone();
            tokio::spawn(async move { probe.send_gated(request, bytes / 4, gate, Duration::from_secs(30)).await })
        };
        // Let the headers and the first quarter of the body arrive.
        self.probe.pause(Duration::from_millis(300)).await;
        let overtaker = self.probe.put(1, "slow", &Condition::None, self.small("slow", 3)).await;
        let _ = open.send(());
        let overtaker = overtaker.map_err(|err| err.to_string())?;
        self.settle(&overtaker, true)?;
        let held = held.await.map_err(|err| format!("the held-back request failed: {err}"))?;
        let (stored, _) = self.settled("slow", Some(3)).await?;
        let evidence = format!(
            "If-Match {etag} with {bytes} bytes, held after {}: {}; unconditional write meanwhile: {}; object holds {}",
            bytes / 4,
            held.describe(),
            overtaker.describe(),
            self::held(stored)
        );
        let check = if !overtaker.succeeded() {
            Check::skipped(NAME, format!("the overtaking write did not land while the body was held back ({evidence})"))
        } else if (held.succeeded() || stored == Some(2)) && overtaker.etag.as_deref() == Some(etag.as_str()) {
            Check::fail(
                NAME,
                Verdict::WeakEtags,
                format!("the overtaking write kept the ETag the held-back write sent, so it matched ({evidence})"),
            )
        } else {
            let outcome = Refusal { answer: &held, took_effect: stored == Some(2), unchanged: stored == Some(3) };
            let what = "the condition was checked before the body arrived: the held-back write won";
            outcome.judge(NAME, Verdict::NotAtomic, what, evidence)
        };
        self.push(check);
        Ok(())
    }

    async fn wrong_secret(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "wrong secret refused";
        self.begin(NAME);
        let mut request = self
            .probe
            .signed(0, Method::PUT, "auth", &Condition::None, self.small("auth", 50))
            .await
            .map_err(|err| err.to_string())?;
        // A signature from another secret: flip its last hex digit.
        if let Some(value) = request.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
            let mut forged = value.to_owned();
            let last = forged.pop().unwrap_or('0');
            forged.push(if last == '0' { '1' } else { '0' });
            if let Ok(forged) = http::HeaderValue::from_str(&forged) {
                request.headers_mut().insert(http::header::AUTHORIZATION, forged);
            }
        }
        let answer = self.probe.send(request).await;
        let check = match answer.status {
            Some(403) => Check::pass(NAME, format!("a PUT with a wrong signature: {}", answer.describe())),
            Some(_) if answer.succeeded() => Check::warn(
                NAME,
                format!(
                    "a PUT with a wrong signature was accepted ({}): anyone who can reach the store can write the lease",
                    answer.describe()
                ),
            ),
            Some(_) => Check::pass(NAME, format!("a PUT with a wrong signature was refused: {}", answer.describe())),
            None => Check::skipped(NAME, format!("no answer: {}", answer.describe())),
        };
        self.push(check);
        Ok(())
    }

    /// The "conditional delete" check: a warning at most, since hoplock
    /// never deletes a lease or a membership object; a store that deletes
    /// on a replaced ETag (reported of Hetzner) matters only to other tools
    /// that rely on it.
    async fn conditional_delete(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "conditional delete";
        self.begin(NAME);
        let first = self.put("delete", &Condition::None, self.small("delete", 60)).await?;
        let second = self.put("delete", &Condition::None, self.small("delete", 61)).await?;
        let (Some(stale), true) = (first.etag.clone(), second.succeeded()) else {
            self.push(Check::warn(NAME, format!("not tried: a plain write failed: {}", second.describe())));
            return Ok(());
        };
        let answer = self
            .probe
            .call(0, Method::DELETE, "delete", &Condition::Matches(stale), Bytes::new())
            .await
            .map_err(|err| err.to_string())?;
        self.settle(&answer, true)?;
        let (stored, _) = self.settled("delete", Some(61)).await?;
        let evidence =
            format!("DELETE with If-Match of a replaced ETag: {}; object holds {}", answer.describe(), held(stored));
        let check = match (answer.status, stored) {
            (Some(412), Some(61)) => Check::pass(NAME, format!("{evidence} (honoured)")),
            _ if not_supported(&answer) && stored == Some(61) => {
                Check::pass(NAME, format!("{evidence} (not supported; hoplock never deletes, so it needs none)"))
            }
            (_, None) => Check::warn(
                NAME,
                format!(
                    "a DELETE with a replaced ETag removed the object ({evidence}): hoplock never deletes, but \
                     tools that rely on conditional deletes are unsafe here"
                ),
            ),
            _ => Check::warn(NAME, format!("could not tell whether the condition was honoured ({evidence})")),
        };
        self.push(check);
        let (refused, _) = self.probe.refusals();
        self.finding(
            "refused requests",
            format!("{refused} conditional writes were refused in this run; whether refused requests are billed is up to the provider"),
        );
        Ok(())
    }

    fn latency(&mut self) {
        let mut latencies = std::mem::take(&mut self.write_latencies);
        if latencies.is_empty() {
            return;
        }
        latencies.sort_unstable();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0;
        self.finding(
            "conditional write round trip",
            format!(
                "p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms over {} writes",
                at(0.5),
                at(0.9),
                at(0.99),
                latencies.len()
            ),
        );
    }
}

/// What a read-back found, for evidence.
fn held(stored: Option<u64>) -> String {
    match stored {
        Some(id) => format!("write {id}"),
        None => "nothing (missing, or bytes not ours)".into(),
    }
}
