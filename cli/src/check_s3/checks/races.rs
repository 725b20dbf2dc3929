//! The race checks: many clients write one key at once, creating it or
//! swapping it on one ETag, round after round; at most one may win.

use std::collections::BTreeMap;

use http::Method;
use tokio::task::JoinSet;

use super::{Fatal, Run, Settings, held};
use crate::check_s3::probe::{Answer, Condition, body};
use crate::check_s3::report::{Check, Verdict};

impl Run<'_> {
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

    pub(super) async fn race_creates(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "racing creates";
        self.begin(NAME);
        let this = &*self;
        let rounds = this.in_lanes(|lane| this.create_lane(NAME, lane)).await?;
        self.judge_rounds(NAME, "creates", "racing creates: rounds", rounds);
        Ok(())
    }

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
            _ => self.fresh_read(name).await,
        }
    }

    pub(super) async fn race_swaps(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "racing compare-and-swaps";
        self.begin(NAME);
        let this = &*self;
        let rounds = this.in_lanes(|lane| this.swap_lane(NAME, lane)).await?;
        let retried = self.judge_rounds(NAME, "compare-and-swaps", "racing swaps: rounds", rounds);
        let retry = match retried {
            Some(answer) => format!(
                "a retry with the fresh ETag after a 409 answered {answer} (on AWS a 409 ConditionalRequestConflict \
                 means another conditional write was in flight: try again; hoplock takes it as a lost race and reads)"
            ),
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
}

/// The write id of a race's one winner, if exactly one write succeeded.
fn sole_winner(answers: &[Answer], first_id: u64) -> Option<u64> {
    let mut winners = answers.iter().enumerate().filter(|(_, answer)| answer.succeeded());
    match (winners.next(), winners.next()) {
        (Some((client, _)), None) => Some(first_id + client as u64),
        _ => None,
    }
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
    /// Rounds with one winner that stuck: the evidence a pass rests on.
    won: u32,
    /// Rounds judged.
    rounds: u32,
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
        self.rounds += 1;
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
            if stored == Some(winner) {
                self.won += 1;
            } else {
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
        } else if self.won * 2 < self.rounds || self.won == 0 {
            Check::skipped(
                name,
                format!(
                    "not judged: only {} of {} rounds had a winner that stuck (at least half are needed); {summary}",
                    self.won, self.rounds
                ),
            )
        } else {
            Check::pass(name, format!("at most one winner per round, {} rounds won; {summary}", self.won))
        }
    }
}
