//! The checks `hoplock check-s3` runs, in order: sequential ones first
//! (each condition alone), then races, a slow body, a linearizability
//! audit, authentication, and the findings.
//!
//! Each check records what it sent and what came back as evidence. A check
//! that should fail but succeeded is a failure whatever else happened; a
//! check whose outcome cannot be told (no answer, a 5xx) is settled by
//! reading the object back, and skipped when even that cannot tell.

use std::collections::BTreeMap;
use std::time::Duration;

use hoplock::clock::{Clock, Instant};

use bytes::Bytes;
use hoplock::BackendError;
use hoplock_testkit::linearizability::{Call, Checker, Operation, Outcome, Verdict as Linearity};
use http::Method;
use tokio::task::JoinSet;

use super::Progress;
use super::probe::{Answer, Condition, Probe, body, body_id};
use super::report::{Check, Report, Verdict};

/// Bodies of the sequential checks: small, and all of one length, so that
/// only their bytes differ.
const SMALL: usize = 512;

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
}

/// A problem that ends the run: the verdict is ERROR.
pub type Fatal = String;

/// The checks, by name, in the order they run (for the progress line).
pub const NAMES: [&str; 12] = [
    "reach the store",
    "create",
    "compare-and-swap",
    "if-match on a missing key",
    "inverted conditions",
    "etag quality",
    "racing creates",
    "racing compare-and-swaps",
    "slow-body overtake",
    "linearizability",
    "read after write",
    "wrong secret refused",
];

/// Runs every check into `report`.
pub async fn run_all(probe: &Probe, settings: Settings, report: &mut Report, progress: &Progress) -> Result<(), Fatal> {
    let mut run = Run { probe, settings, report, progress, write_latencies: Vec::new() };
    run.reach().await?;
    let created = run.create().await?;
    let swapped = run.compare_and_swap().await?;
    run.missing_key().await?;
    run.inverted(created, swapped).await?;
    run.etag_quality().await?;
    let unsupported = run.report.checks.iter().any(|check| check.verdict == Some(Verdict::Unsupported));
    if unsupported {
        // Races of refused requests prove nothing: say so rather than fail.
        for name in ["racing creates", "racing compare-and-swaps", "slow-body overtake", "linearizability"] {
            run.report.checks.push(Check::skipped(name, "conditional writes are refused"));
        }
    } else {
        run.race_creates().await?;
        run.race_swaps().await?;
        run.slow_body().await?;
        run.linearizability().await?;
    }
    run.read_after_write().await?;
    run.wrong_secret().await?;
    run.conditional_delete().await?;
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

    /// Reads `name` back: its write id (`None` for a missing key or bytes
    /// not ours) and ETag. A read with no answer is tried again.
    async fn read_back(&self, name: &str) -> Result<(Option<u64>, Option<String>), Fatal> {
        let mut last = None;
        for _ in 0..3 {
            let answer = self.probe.get(0, name).await.map_err(|err| err.to_string())?;
            self.settle(&answer, false)?;
            match answer.status {
                Some(200) => return Ok((body_id(&answer.body), answer.etag)),
                Some(404) => return Ok((None, None)),
                _ => last = Some(answer.describe()),
            }
        }
        Err(format!("reading {} back failed three times: {}", self.probe.key(name), last.unwrap_or_default()))
    }

    /// Reads `name` back until it shows `expected`, for up to three
    /// seconds: a store with stale reads shows a write late, and a check
    /// must judge what the store holds, not what a stale read says.
    /// Returns the last read.
    async fn settled(&self, name: &str, expected: Option<u64>) -> Result<(Option<u64>, Option<String>), Fatal> {
        let deadline = self.probe.clock().now() + Duration::from_secs(3);
        loop {
            let read = self.read_back(name).await?;
            if read.0 == expected || self.probe.clock().now() >= deadline {
                return Ok(read);
            }
            self.probe.pause(Duration::from_millis(200)).await;
        }
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
            evidence.push(format!("{endpoint}: {}", answer.describe()));
        }
        self.push(Check::pass("reach the store", evidence.join("; ")));
        Ok(())
    }

    /// Returns whether a create of a missing key succeeded.
    async fn create(&mut self) -> Result<bool, Fatal> {
        const NAME: &str = "create";
        self.begin(NAME);
        let first = self.put("create", &Condition::Absent, self.small("create", 1)).await?;
        if not_supported(&first) {
            self.push(Check::not_supported(NAME, format!("If-None-Match: * on a missing key: {}", first.describe())));
            return Ok(false);
        }
        if !first.succeeded() {
            self.push(Check::fail(
                NAME,
                Verdict::Unsupported,
                format!("If-None-Match: * on a missing key was refused: {}", first.describe()),
            ));
            return Ok(false);
        }
        let second = self.put("create", &Condition::Absent, self.small("create", 2)).await?;
        let (stored, _) = self.settled("create", Some(1)).await?;
        let evidence = format!(
            "missing key: {}; existing key: {}; object holds {}",
            first.describe(),
            second.describe(),
            held(stored)
        );
        let outcome = Refusal { answer: &second, took_effect: stored == Some(2), unchanged: stored == Some(1) };
        let check =
            outcome.judge(NAME, Verdict::IgnoresConditions, "a create of an existing key took effect", evidence);
        self.push(check);
        Ok(true)
    }

    /// Returns whether a write with the current ETag succeeded.
    async fn compare_and_swap(&mut self) -> Result<bool, Fatal> {
        const NAME: &str = "compare-and-swap";
        self.begin(NAME);
        let base = self.put("cas", &Condition::None, self.small("cas", 10)).await?;
        let Some(first) = base.etag.clone().filter(|_| base.succeeded()) else {
            self.push(Check::skipped(NAME, format!("could not write the object to swap: {}", base.describe())));
            return Ok(false);
        };
        let current = self.put("cas", &Condition::Matches(first.clone()), self.small("cas", 11)).await?;
        if not_supported(&current) {
            self.push(Check::not_supported(NAME, format!("If-Match with the current ETag: {}", current.describe())));
            return Ok(false);
        }
        if !current.succeeded() {
            self.push(Check::fail(
                NAME,
                Verdict::Unsupported,
                format!("If-Match with the current ETag {first} was refused: {}", current.describe()),
            ));
            return Ok(false);
        }
        let second = current.etag.clone().unwrap_or_default();
        let stale = self.put("cas", &Condition::Matches(first.clone()), self.small("cas", 12)).await?;
        let (stored, _) = self.settled("cas", Some(11)).await?;
        let evidence = format!(
            "current ETag {first}: {} (new ETag {second}); replaced ETag: {}; object holds {}",
            current.describe(),
            stale.describe(),
            held(stored)
        );
        let check = if second == first {
            Check::fail(NAME, Verdict::WeakEtags, format!("different bytes kept the ETag {first} ({evidence})"))
        } else {
            let outcome = Refusal { answer: &stale, took_effect: stored == Some(12), unchanged: stored == Some(11) };
            outcome.judge(NAME, Verdict::IgnoresConditions, "a write with a replaced ETag took effect", evidence)
        };
        self.push(check);
        Ok(true)
    }

    async fn missing_key(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "if-match on a missing key";
        self.begin(NAME);
        let nowhere = {
            use hoplock::entropy::Entropy as _;
            let entropy = hoplock::entropy::OsEntropy;
            format!("\"{:016x}{:016x}\"", entropy.next_u64(), entropy.next_u64())
        };
        let answer = self.put("missing", &Condition::Matches(nowhere.clone()), self.small("missing", 20)).await?;
        let (stored, _) = self.settled("missing", None).await?;
        let evidence =
            format!("If-Match {nowhere} on a missing key: {}; key afterwards: {}", answer.describe(), held(stored));
        let outcome = Refusal { answer: &answer, took_effect: stored.is_some(), unchanged: stored.is_none() };
        let check = outcome.judge(NAME, Verdict::IgnoresConditions, "the write created the key", evidence);
        self.push(check);
        Ok(())
    }

    /// Conditions that should hold must not be refused, and support on
    /// GET must not pass for support on PUT: the PUT checks above judge
    /// PUT alone, and what GET and HEAD do is reported here.
    async fn inverted(&mut self, created: bool, swapped: bool) -> Result<(), Fatal> {
        const NAME: &str = "inverted conditions";
        self.begin(NAME);
        let (_, etag) = self.read_back("cas").await?;
        let mut conditional_reads = Vec::new();
        if let Some(etag) = &etag {
            for method in [Method::GET, Method::HEAD] {
                let condition = Condition::Differs(etag.clone());
                let answer = self
                    .probe
                    .call(0, method.clone(), "cas", &condition, Bytes::new())
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
        if let Some((_, etag)) = etags.last() {
            let form = if etag.starts_with('"') { "quoted" } else { "bare" };
            let bare = etag.trim_matches('"').to_owned();
            let answer = self.put("etag", &Condition::Matches(bare.clone()), self.small("etag", 36)).await?;
            let accepted = if answer.succeeded() { "accepted" } else { "refused" };
            self.finding(
                "ETag forms",
                format!(
                    "answers carry {form} ETags; If-Match with the bare ETag {bare}: {} ({accepted})",
                    answer.describe()
                ),
            );
        }
        Ok(())
    }

    /// Sends one write per client at once; the answers in client order.
    async fn race(&self, name: &str, condition: &Condition, first_id: u64) -> Result<Vec<Answer>, Fatal> {
        let clients = self.settings.concurrency as usize;
        let mut requests = Vec::with_capacity(clients);
        for client in 0..clients {
            let payload = body(&self.report.prefix, name, first_id + client as u64, self.settings.body_bytes);
            let request = self
                .probe
                .signed(client, Method::PUT, name, condition, payload)
                .await
                .map_err(|err| err.to_string())?;
            requests.push(request);
        }
        // Every request is signed before the first is sent, so they leave
        // together.
        let mut racing = JoinSet::new();
        for (client, request) in requests.into_iter().enumerate() {
            let probe = self.probe.clone();
            racing.spawn(async move { (client, probe.send(request).await) });
        }
        let mut answers: Vec<Option<Answer>> = vec![None; clients];
        while let Some(joined) = racing.join_next().await {
            let (client, answer) = joined.map_err(|err| format!("a racing request failed: {err}"))?;
            answers[client] = Some(answer);
        }
        let answers: Vec<Answer> = answers.into_iter().flatten().collect();
        for answer in &answers {
            self.settle(answer, true)?;
        }
        Ok(answers)
    }

    /// Runs `lane` for each of [`LANES`] lanes at once, each on rounds
    /// `lane, lane + LANES, ...`, and returns what they found, in round
    /// order. Rounds of different lanes use different keys, so the lanes
    /// race only within a key, as the rounds would one after the other:
    /// a store that makes contended writes wait (some take a lock and
    /// retry it after a second) costs a fifth of the time.
    async fn in_lanes<F, Fut>(&self, lane: F) -> Result<Vec<RoundResult>, Fatal>
    where
        F: Fn(u32) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<RoundResult>, Fatal>>,
    {
        // One future per lane; the join below must name every lane.
        const _: () = assert!(LANES == 5);
        let (a, b, c, d, e) = tokio::join!(lane(0), lane(1), lane(2), lane(3), lane(4));
        let mut rounds: Vec<RoundResult> = [a?, b?, c?, d?, e?].into_iter().flatten().collect();
        rounds.sort_by_key(|round| round.round);
        Ok(rounds)
    }

    async fn race_creates(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "racing creates";
        self.begin(NAME);
        let this = &*self;
        let rounds = this.in_lanes(|lane| this.create_lane(NAME, lane)).await?;
        self.judge_rounds(NAME, "creates", "racing creates: rounds", rounds);
        Ok(())
    }

    /// Judges the rounds of one race check into a check and its findings.
    /// Judges the rounds of one race check into a check and the finding
    /// `rounds_finding` (rounds nobody won, or settled by reading back).
    /// Returns what a retry after a 409 got, if one was made.
    fn judge_rounds(
        &mut self,
        name: &'static str,
        what: &str,
        rounds_finding: &'static str,
        rounds: Vec<RoundResult>,
    ) -> Option<String> {
        let mut tally = RaceTally::default();
        let mut retried = None;
        for round in rounds {
            self.write_latencies.extend(round.answers.iter().map(Answer::latency));
            tally.judge(round.round, round.first_id, &round.answers, round.stored, round.before, round.weak);
            retried = retried.or(round.retry);
        }
        let check = tally.verdict(name, self.settings, what);
        self.push(check);
        if tally.no_winner > 0 || tally.settled > 0 {
            let value = format!(
                "{} rounds with no winner, {} settled by reading back (no clear answer)",
                tally.no_winner, tally.settled
            );
            self.finding(rounds_finding, value);
        }
        retried
    }

    /// Reads a raced key back. With one winner (or none) the store must
    /// come to hold it (or `before`), so the read waits for that; with
    /// several, one read says which stuck.
    async fn read_after_race(
        &self,
        name: &str,
        answers: &[Answer],
        first_id: u64,
        before: Option<u64>,
    ) -> Result<(Option<u64>, Option<String>), Fatal> {
        match answers.iter().filter(|answer| answer.succeeded()).count() {
            0 | 1 => self.settled(name, sole_winner(answers, first_id).or(before)).await,
            _ => self.read_back(name).await,
        }
    }

    async fn race_swaps(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "racing compare-and-swaps";
        self.begin(NAME);
        let this = &*self;
        let rounds = this.in_lanes(|lane| this.swap_lane(NAME, lane)).await?;
        let retried = self.judge_rounds(NAME, "compare-and-swaps", "racing swaps: rounds", rounds);
        let retry = match retried {
            Some(answer) => format!("a retry with the fresh ETag after a 409 answered {answer}"),
            None => "no 409 seen".into(),
        };
        self.finding("retry after 409", retry);
        Ok(())
    }

    /// One lane of racing creates: a fresh key per round.
    async fn create_lane(&self, check: &str, lane: u32) -> Result<Vec<RoundResult>, Fatal> {
        let mut found = Vec::new();
        for round in (lane..self.settings.rounds).step_by(LANES as usize) {
            self.progress.round(check, round + 1, self.settings.rounds);
            let name = format!("race-create-{round}");
            let first_id = 100_000 + u64::from(round) * 1000;
            let answers = self.race(&name, &Condition::Absent, first_id).await?;
            let (stored, _) = self.read_after_race(&name, &answers, first_id, None).await?;
            found.push(RoundResult { round, first_id, answers, stored, before: None, weak: false, retry: None });
        }
        Ok(found)
    }

    /// One lane of racing compare-and-swaps, on a key of its own.
    async fn swap_lane(&self, check: &str, lane: u32) -> Result<Vec<RoundResult>, Fatal> {
        let name = format!("race-cas-{lane}");
        let mut found = Vec::new();
        if lane >= self.settings.rounds {
            return Ok(found);
        }
        let base_id = 300_000 + u64::from(lane);
        let base =
            self.probe.put(0, &name, &Condition::None, self.small(&name, base_id)).await.map_err(|e| e.to_string())?;
        self.settle(&base, true)?;
        let Some(mut etag) = base.etag.clone().filter(|_| base.succeeded()) else {
            return Err(format!("could not write the object to swap, {}: {}", self.probe.key(&name), base.describe()));
        };
        let mut stored_id = Some(base_id);
        let mut retried = false;
        let rounds: Vec<u32> = (lane..self.settings.rounds).step_by(LANES as usize).collect();
        for (index, &round) in rounds.iter().enumerate() {
            self.progress.round(check, round + 1, self.settings.rounds);
            let first_id = 200_000 + u64::from(round) * 1000;
            let answers = self.race(&name, &Condition::Matches(etag.clone()), first_id).await?;
            let winners: Vec<&Answer> = answers.iter().filter(|answer| answer.succeeded()).collect();
            // Several winners that got back the ETag they all sent, or one
            // another's: the ETags cannot tell the versions apart, which
            // is a weak ETag, not a missing lock.
            let weak = winners.iter().enumerate().any(|(i, winner)| {
                winner.etag.as_deref() == Some(etag.as_str())
                    || winners[..i].iter().any(|other| other.etag == winner.etag)
            });
            let (stored, now) = match &winners[..] {
                // The usual round: the next round's racers swap from the
                // winner's ETag, and a winner that did not stick shows
                // there as a round nobody can win, which is read back.
                [winner] if winner.etag.is_some() && index + 1 < rounds.len() => {
                    (sole_winner(&answers, first_id), winner.etag.clone())
                }
                _ => self.read_after_race(&name, &answers, first_id, stored_id).await?,
            };
            let Some(now) = now else {
                return Err(format!("the object raced on, {}, vanished", self.probe.key(&name)));
            };
            let mut result = RoundResult { round, first_id, answers, stored, before: stored_id, weak, retry: None };
            stored_id = stored;
            etag = now;
            // A 409 says "try again": once per lane, check that a retry
            // with the fresh ETag works.
            if !retried && result.answers.iter().any(|answer| answer.status == Some(409)) {
                retried = true;
                let id = first_id + 999;
                let again = self
                    .probe
                    .put(0, &name, &Condition::Matches(etag.clone()), self.small(&name, id))
                    .await
                    .map_err(|e| e.to_string())?;
                self.settle(&again, true)?;
                result.retry = Some(again.describe());
                let (stored, now) = self.settled(&name, again.succeeded().then_some(id).or(stored_id)).await?;
                stored_id = stored;
                etag = now.unwrap_or(etag);
            }
            found.push(result);
        }
        Ok(found)
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

    /// Several clients read the object and swap it on what they read, all
    /// at once; the writes must fit one atomic register.
    async fn linearizability(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "linearizability";
        self.begin(NAME);
        let base = self.put("audit", &Condition::None, body(&self.report.prefix, "audit", 1, AUDIT_BYTES)).await?;
        if !base.succeeded() {
            self.push(Check::skipped(NAME, format!("could not write the object: {}", base.describe())));
            return Ok(());
        }
        let clients = self.settings.concurrency.clamp(2, 8) as u64;
        let steps = self.settings.rounds.max(4);
        let origin = self.probe.clock().now();
        let mut auditors = JoinSet::new();
        for client in 0..clients {
            let probe = self.probe.clone();
            let prefix = self.report.prefix.clone();
            auditors.spawn(audit_client(probe, prefix, client, steps, origin));
        }
        let mut history = Vec::new();
        let mut written = vec![1];
        let mut kept_etag = 0;
        while let Some(joined) = auditors.join_next().await {
            let audit = joined.map_err(|err| format!("an auditing client failed: {err}"))?;
            if let Some(fatal) = audit.fatal {
                return Err(fatal);
            }
            history.extend(audit.operations);
            written.extend(audit.ids);
            kept_etag += audit.kept_etag;
        }
        history.sort_by_key(|op: &Operation| op.invoke);
        let writes: Vec<Operation> = history.iter().filter(|op| op.call.is_write()).cloned().collect();
        let reads = history.len() - writes.len();
        // Reads only have to return something somebody wrote.
        let phantom = history.iter().find_map(|op| match op.outcome() {
            Some(Outcome::Value(id)) if !written.contains(&id) => Some(id),
            _ => None,
        });
        let checker = Checker::new().initial_state(Some(1));
        let verdict = checker.check(&writes).map_err(|err| format!("the audit history is malformed: {err}"))?;
        let ok = writes.iter().filter(|op| op.outcome() == Some(Outcome::Ok)).count();
        let evidence =
            format!("{clients} clients, {} conditional writes ({ok} succeeded), {reads} reads", writes.len());
        let check = match (&verdict, phantom) {
            (_, Some(id)) => Check::fail(
                NAME,
                Verdict::NotAtomic,
                format!("a read returned bytes nobody wrote (id {id}); {evidence}"),
            ),
            (Linearity::NotLinearizable(_), None) if kept_etag > 0 => Check::fail(
                NAME,
                Verdict::WeakEtags,
                format!(
                    "the writes fit no atomic register, and {kept_etag} successful writes got back the very ETag they \
                     replaced ({evidence})"
                ),
            ),
            (Linearity::NotLinearizable(counterexample), None) => Check::fail(
                NAME,
                Verdict::NotAtomic,
                format!("the writes fit no atomic register ({evidence}):\n{}", counterexample.explain(&writes, 4)),
            ),
            (Linearity::Unknown { steps }, None) => {
                Check::skipped(NAME, format!("the checker's budget ran out after {steps} steps ({evidence})"))
            }
            (Linearity::Linearizable { .. }, None) => Check::pass(NAME, format!("linearizable: {evidence}")),
        };
        self.push(check);
        if verdict.is_linearizable() {
            let with_reads = checker.check(&history).map_err(|err| format!("the audit history is malformed: {err}"))?;
            let reads = match with_reads {
                Linearity::Linearizable { .. } => "linearizable too".to_owned(),
                Linearity::NotLinearizable(_) => "not linearizable: some reads were stale".to_owned(),
                Linearity::Unknown { .. } => "undecided (budget ran out)".to_owned(),
            };
            self.finding("reads in the audit", reads);
        }
        Ok(())
    }

    async fn read_after_write(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "read after write";
        self.begin(NAME);
        let mut stale = Vec::new();
        for id in 40..45 {
            let answer = self.put("fresh", &Condition::None, self.small("fresh", id)).await?;
            if !answer.succeeded() {
                self.push(Check::skipped(NAME, format!("a plain write failed: {}", answer.describe())));
                return Ok(());
            }
            let (stored, _) = self.read_back("fresh").await?;
            if stored != Some(id) {
                // Let it settle, so the next write is judged on its own.
                self.settled("fresh", Some(id)).await?;
                stale.push(format!("after write {id} a read returned {}", held(stored)));
            }
        }
        let check = if stale.is_empty() {
            Check::pass(NAME, "5 reads right after 5 writes each returned the write")
        } else {
            Check::warn(
                NAME,
                format!(
                    "stale reads ({}): safe, since every takeover is a conditional write, but followers see changes late",
                    stale.join("; ")
                ),
            )
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

    /// A finding only: hoplock never deletes a lease.
    async fn conditional_delete(&mut self) -> Result<(), Fatal> {
        let first = self.put("delete", &Condition::None, self.small("delete", 60)).await?;
        let second = self.put("delete", &Condition::None, self.small("delete", 61)).await?;
        let (Some(stale), true) = (first.etag.clone(), second.succeeded()) else {
            self.finding("conditional DELETE", "not tried: a plain write failed");
            return Ok(());
        };
        let answer = self
            .probe
            .call(0, Method::DELETE, "delete", &Condition::Matches(stale), Bytes::new())
            .await
            .map_err(|err| err.to_string())?;
        self.settle(&answer, true)?;
        let (stored, _) = self.settled("delete", Some(61)).await?;
        let meaning = match (answer.status, stored) {
            (Some(412), Some(61)) => "honoured",
            (_, None) => {
                "ignored: the stale delete removed the object (hoplock never deletes; only a reset would care)"
            }
            _ if not_supported(&answer) => "not supported",
            _ => "unclear",
        };
        self.finding("conditional DELETE", format!("If-Match with a replaced ETag: {} ({meaning})", answer.describe()));
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

/// A write that should have been refused: its answer, and what reading
/// the object back showed.
struct Refusal<'a> {
    answer: &'a Answer,
    /// The object holds the write's bytes.
    took_effect: bool,
    /// The object holds what it held before.
    unchanged: bool,
}

impl Refusal<'_> {
    /// Fails with `verdict` if the write succeeded or its bytes landed
    /// anyway; passes if it was refused (412, 409, 404) and the object is
    /// unchanged; a loud refusal of the condition is "not supported", and
    /// anything else (a 5xx, no answer, a changed object) is inconclusive.
    fn judge(&self, name: &'static str, verdict: Verdict, what: &str, evidence: String) -> Check {
        if self.answer.succeeded() || self.took_effect {
            Check::fail(name, verdict, format!("{what} ({evidence})"))
        } else if not_supported(self.answer) {
            Check::not_supported(name, evidence)
        } else if self.answer.refused() && self.unchanged {
            Check::pass(name, evidence)
        } else {
            Check::skipped(name, format!("inconclusive: {evidence}"))
        }
    }
}

/// The write id of a race's one winner, if exactly one write succeeded.
fn sole_winner(answers: &[Answer], first_id: u64) -> Option<u64> {
    let mut winners = answers.iter().enumerate().filter(|(_, answer)| answer.succeeded());
    match (winners.next(), winners.next()) {
        (Some((client, _)), None) => Some(first_id + client as u64),
        _ => None,
    }
}

/// What a read-back found, for evidence.
fn held(stored: Option<u64>) -> String {
    match stored {
        Some(id) => format!("write {id}"),
        None => "nothing (missing, or bytes not ours)".into(),
    }
}

/// What one auditing client did.
#[derive(Default)]
struct Audit {
    operations: Vec<Operation>,
    /// The ids it wrote.
    ids: Vec<u64>,
    /// Successful writes whose new ETag equals the one they replaced.
    kept_etag: u32,
    /// A problem that ends the run.
    fatal: Option<Fatal>,
}

/// One auditing client: read, then swap what was read, `steps` times.
async fn audit_client(probe: Probe, prefix: String, client: u64, steps: u32, origin: Instant) -> Audit {
    let nanos = |at: Instant| at.saturating_duration_since(origin).as_nanos() as u64;
    let mut audit = Audit::default();
    for step in 0..u64::from(steps) {
        let read = match probe.get(client as usize, "audit").await {
            Ok(read) => read,
            Err(err) => return Audit { fatal: Some(err.to_string()), ..audit },
        };
        let seen = match read.status {
            Some(200) => body_id(&read.body),
            _ => None,
        };
        if let Some(seen) = seen {
            let operation =
                Operation::completed(client, Call::Read, nanos(read.sent), nanos(read.received), Outcome::Value(seen));
            audit.operations.push(operation);
        }
        let (Some(expected), Some(etag)) = (seen, read.etag.clone()) else { continue };
        let new = 1_000_000 + client * 10_000 + step;
        audit.ids.push(new);
        let payload = body(&prefix, "audit", new, AUDIT_BYTES);
        let write = match probe.put(client as usize, "audit", &Condition::Matches(etag.clone()), payload).await {
            Ok(write) => write,
            Err(err) => return Audit { fatal: Some(err.to_string()), ..audit },
        };
        let call = Call::Update { expected, new };
        let (sent, received) = (nanos(write.sent), nanos(write.received));
        let operation = match write.status {
            Some(status) if (200..300).contains(&status) => {
                if write.etag.as_deref() == Some(etag.as_str()) {
                    audit.kept_etag += 1;
                }
                Operation::completed(client, call, sent, received, Outcome::Ok)
            }
            Some(412 | 404) => Operation::completed(client, call, sent, received, Outcome::Refused),
            // Nothing changed, and the refusal says nothing about the state.
            Some(409) => continue,
            _ => Operation::indeterminate(client, call, sent),
        };
        audit.operations.push(operation);
    }
    audit
}

/// How many race rounds run at once, each on a key of its own.
const LANES: u32 = 5;

/// One race round: who got what, and what the store held afterwards.
#[derive(Debug)]
struct RoundResult {
    round: u32,
    first_id: u64,
    answers: Vec<Answer>,
    /// The write id the object held after the round.
    stored: Option<u64>,
    /// The write id it held before.
    before: Option<u64>,
    /// Several winners explained by a weak ETag.
    weak: bool,
    /// A retry after a 409, and what it got.
    retry: Option<String>,
}

/// What the rounds of one race check showed.
#[derive(Debug, Default)]
struct RaceTally {
    /// Rounds in which more than one write succeeded.
    double: u32,
    /// Rounds with several winners whose new object kept the ETag they
    /// all sent, explained by weak ETags.
    weak: u32,
    /// Rounds whose one successful write is not what the object holds.
    lost: u32,
    /// Rounds with no winner at all.
    no_winner: u32,
    /// Rounds whose winner's reply was lost or a 5xx, settled by reading back.
    settled: u32,
    /// The first bad round's evidence.
    evidence: Option<String>,
    /// Every answer by status, losers and winners.
    statuses: BTreeMap<String, u32>,
}

impl RaceTally {
    fn judge(
        &mut self,
        round: u32,
        first_id: u64,
        answers: &[Answer],
        stored: Option<u64>,
        before: Option<u64>,
        weak_etag: bool,
    ) {
        for answer in answers {
            *self.statuses.entry(answer.describe()).or_default() += 1;
        }
        let winners: Vec<u64> = answers
            .iter()
            .enumerate()
            .filter(|(_, answer)| answer.succeeded())
            .map(|(client, _)| first_id + client as u64)
            .collect();
        let ours = stored.filter(|id| (first_id..first_id + answers.len() as u64).contains(id));
        let describe = || {
            let statuses: Vec<String> = answers.iter().map(Answer::describe).collect();
            format!(
                "round {round}: answers [{}], winners {winners:?}, object holds {}",
                statuses.join(", "),
                held(stored)
            )
        };
        if winners.len() > 1 && weak_etag {
            self.weak += 1;
            self.evidence.get_or_insert_with(describe);
        } else if winners.len() > 1 {
            self.double += 1;
            self.evidence.get_or_insert_with(describe);
        } else if let [winner] = winners[..] {
            if stored != Some(winner) {
                self.lost += 1;
                self.evidence.get_or_insert_with(describe);
            }
        } else if ours.is_some() {
            let unclear = answers.iter().any(|answer| !answer.lost_cleanly());
            if unclear {
                self.settled += 1;
            } else {
                // Every writer was told it lost, yet one write landed.
                self.lost += 1;
                self.evidence.get_or_insert_with(describe);
            }
        } else if stored == before {
            self.no_winner += 1;
        }
    }

    fn verdict(&self, name: &'static str, settings: Settings, what: &str) -> Check {
        let statuses: Vec<String> = self.statuses.iter().map(|(status, count)| format!("{status}×{count}")).collect();
        let summary = format!(
            "{} rounds of {} {what} of {} KiB: answers {}",
            settings.rounds,
            settings.concurrency,
            settings.body_bytes / 1024,
            statuses.join(", ")
        );
        if self.double > 0 || self.lost > 0 {
            let evidence = self.evidence.clone().unwrap_or_default();
            Check::fail(
                name,
                Verdict::NotAtomic,
                format!(
                    "{} rounds with several winners, {} with a winner that did not stick; first: {evidence}; {summary}",
                    self.double, self.lost
                ),
            )
        } else if self.weak > 0 {
            let evidence = self.evidence.clone().unwrap_or_default();
            Check::fail(
                name,
                Verdict::WeakEtags,
                format!(
                    "{} rounds with several winners, each leaving the ETag they all sent: the ETag does not tell \
                     versions apart; first: {evidence}; {summary}",
                    self.weak
                ),
            )
        } else {
            Check::pass(name, format!("at most one winner per round; {summary}"))
        }
    }
}
