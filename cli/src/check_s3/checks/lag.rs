//! Reads that judge what the store holds, not what a lagging replica says.
//!
//! The read lag is measured first: a few writes, each read until it shows.
//! Every read-back that settles a check is sent at least that long after
//! the write it judges. At the end, once the settle time has passed since
//! the last refused write, every key is read again: a refused write whose
//! bytes show up then (or in any read before) was applied after all, which
//! is "ignores conditions" however correct its 412 looked.

use std::collections::BTreeSet;
use std::time::Duration;

use hoplock::clock::{Clock, Instant};
use tokio::task::JoinSet;

use super::{Fatal, Run, lock};
use crate::check_s3::probe::{Condition, Probe, body, body_id};
use crate::check_s3::report::{Check, Verdict};

/// Keys written and read back to measure the read lag; each is written
/// twice (a create and an overwrite), so the lag is sampled this many
/// times over.
const LAG_KEYS: u64 = 4;

/// The longest read lag waited out. A store whose reads take longer than
/// this to show a write gets an ERROR that names the lag, not a verdict on
/// its conditions: the checks could not tell what it holds.
pub const MAX_READ_LAG: Duration = Duration::from_secs(30);

/// How often a lag sample is read while it has not shown yet.
const LAG_POLL: Duration = Duration::from_millis(50);

/// How long a read-back keeps trying for the state it expects, once the
/// read lag has been waited out.
const SETTLE_TRIES_FOR: Duration = Duration::from_secs(3);

/// What the lag measurement found.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadLag {
    /// The longest time from a write's answer to the first read that
    /// showed it.
    pub max: Duration,
    /// Samples whose first read, sent right after the write's answer,
    /// already showed it.
    pub at_once: u32,
    /// Samples taken.
    pub samples: u32,
}

impl ReadLag {
    /// How long a read-back waits after the write it judges: nothing for a
    /// store whose reads showed every write at once, and the longest lag
    /// seen plus a quarter and 200 ms otherwise.
    pub fn wait(&self) -> Duration {
        if self.at_once == self.samples { Duration::ZERO } else { self.max + self.max / 4 + Duration::from_millis(200) }
    }
}

impl Run<'_> {
    /// Measures the read lag (the "read lag" check): a warning when reads
    /// lag, an ERROR when a write does not show within [`MAX_READ_LAG`].
    pub(super) async fn read_lag(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "read lag";
        self.begin(NAME);
        let mut samplers = JoinSet::new();
        for key in 0..LAG_KEYS {
            let (probe, prefix) = (self.probe.clone(), self.report.prefix.clone());
            samplers.spawn(async move { sample(&probe, &prefix, key).await });
        }
        let mut lag = ReadLag::default();
        while let Some(joined) = samplers.join_next().await {
            let samples = joined.map_err(|err| format!("a read-lag sample failed: {err}"))??;
            for (waited, at_once) in samples {
                lag.max = lag.max.max(waited);
                lag.samples += 1;
                lag.at_once += u32::from(at_once);
            }
        }
        self.lag = lag;
        self.report.read_lag = Some(lag.max);
        self.report.read_lag_wait = lag.wait();
        let evidence = format!(
            "{} writes each read until shown: {} showed in the first read sent after the write's answer; longest \
             wait {} ms",
            lag.samples,
            lag.at_once,
            lag.max.as_millis()
        );
        let check = if lag.at_once == lag.samples {
            Check::pass(NAME, evidence)
        } else {
            Check::warn(
                NAME,
                format!(
                    "reads lag writes by up to {} ms ({evidence}): safe, since every takeover is a conditional write, \
                     but followers see changes late, so takeovers and keyed moves come later by about that much; \
                     every read-back here waited {} ms",
                    lag.max.as_millis(),
                    lag.wait().as_millis()
                ),
            )
        };
        self.push(check);
        Ok(())
    }

    /// Reads `name` back: its write id (`None` for a missing key or bytes
    /// not ours) and ETag. A read with no answer is tried again. A read
    /// that shows a write the store refused is noted as evidence.
    pub(super) async fn read_back(&self, name: &str) -> Result<(Option<u64>, Option<String>), Fatal> {
        let mut last = None;
        for _ in 0..3 {
            let answer = self.probe.get_start(0, name).await.map_err(|err| err.to_string())?;
            if answer.code != "AccessDenied" {
                self.settle(&answer, false)?;
            }
            match answer.status {
                Some(200 | 206) => {
                    let id = body_id(&answer.body);
                    self.note_if_refused(name, id);
                    return Ok((id, answer.etag));
                }
                // A key that does not exist reads as 403 AccessDenied to a
                // caller without ListBucket, as `reach` allows.
                Some(404) => return Ok((None, None)),
                Some(403) if answer.code == "AccessDenied" => return Ok((None, None)),
                _ => last = Some(answer.describe()),
            }
        }
        Err(format!("reading {} back failed three times: {}", self.probe.key(name), last.unwrap_or_default()))
    }

    /// Reads `name` back after waiting out the read lag, so the read shows
    /// every write answered before this call.
    pub(super) async fn fresh_read(&self, name: &str) -> Result<(Option<u64>, Option<String>), Fatal> {
        self.probe.pause(self.lag.wait()).await;
        self.read_back(name).await
    }

    /// Reads `name` back, once the read lag has passed, until it shows
    /// `expected`, for up to three seconds more: a check must judge what
    /// the store holds, not what a stale read says. Returns the last read.
    pub(super) async fn settled(
        &self,
        name: &str,
        expected: Option<u64>,
    ) -> Result<(Option<u64>, Option<String>), Fatal> {
        self.probe.pause(self.lag.wait()).await;
        self.settled_now(name, expected).await
    }

    /// [`Run::settled`] for a caller that has already waited out the read
    /// lag since its last write to `name`.
    pub(super) async fn settled_now(
        &self,
        name: &str,
        expected: Option<u64>,
    ) -> Result<(Option<u64>, Option<String>), Fatal> {
        let deadline = self.probe.clock().now() + SETTLE_TRIES_FOR;
        loop {
            let read = self.read_back(name).await?;
            if read.0 == expected || self.probe.clock().now() >= deadline {
                return Ok(read);
            }
            self.probe.pause(Duration::from_millis(200)).await;
        }
    }

    pub(super) fn note_if_refused(&self, name: &str, id: Option<u64>) {
        let Some(id) = id else { return };
        if let Some(refused) = self.probe.refused(name).into_iter().find(|write| write.id == id) {
            let seen = self.probe.clock().now().saturating_duration_since(refused.at);
            let note = format!("{} holds write {id}, refused {} ms before", self.probe.key(name), seen.as_millis());
            let mut late = lock(&self.late);
            if !late.contains(&note) {
                late.push(note);
            }
        }
    }

    /// The "refused writes stay refused" check: waits until the settle
    /// time has passed since the last refused write, reads every key
    /// written once more, and fails if any read (this one or one before)
    /// showed a refused write.
    pub(super) async fn refused_stay_refused(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "refused writes stay refused";
        self.begin(NAME);
        let (refusals, last) = self.probe.refusals();
        let Some(last) = last else {
            self.push(Check::skipped(NAME, "not judged: no conditional write was refused"));
            return Ok(());
        };
        let until: Instant = last + self.settings.settle;
        self.probe.pause(until.saturating_duration_since(self.probe.clock().now())).await;
        let names: BTreeSet<String> = self
            .probe
            .written()
            .into_iter()
            .filter_map(|key| key.strip_prefix(self.report.prefix.as_str()).map(str::to_owned))
            .collect();
        // Every write was answered before this pass began: one wait for the
        // read lag covers them all.
        self.probe.pause(self.lag.wait()).await;
        let waited_since = self.probe.clock().now().saturating_duration_since(last);
        for name in &names {
            self.read_back(name).await?;
        }
        let late = lock(&self.late).clone();
        let evidence = format!(
            "{refusals} conditional writes refused; {} keys read again {:.1} s after the last refusal (--settle {} s)",
            names.len(),
            waited_since.as_secs_f64(),
            self.settings.settle.as_secs_f64()
        );
        let check = if late.is_empty() {
            Check::pass(NAME, format!("{evidence}; none holds a refused write"))
        } else {
            Check::fail(
                NAME,
                Verdict::IgnoresConditions,
                format!(
                    "{} refused writes took effect later, so a 412 did not mean the write was refused: {} ({evidence})",
                    late.len(),
                    late.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
                ),
            )
        };
        self.push(check);
        Ok(())
    }
}

/// How many times a lag sample's plain write is tried before the run ends.
const WRITE_TRIES: u32 = 3;

/// One key's lag samples: `(wait, shown at once)` for a create and an
/// overwrite. Key `k` is written through endpoint `k` (of those given) and
/// read through the first, as the read-backs are: a lag between endpoints
/// is measured too.
async fn sample(probe: &Probe, prefix: &str, key: u64) -> Result<Vec<(Duration, bool)>, Fatal> {
    let name = format!("lag-{key}");
    let mut samples = Vec::new();
    for write in 0..2 {
        let id = 70_000 + key * 10 + write;
        let mut tries = 0;
        let answer = loop {
            tries += 1;
            let payload = body(prefix, &name, id, super::SMALL);
            let answer =
                probe.put(key as usize, &name, &Condition::None, payload).await.map_err(|err| err.to_string())?;
            if answer.succeeded() {
                break answer;
            }
            if tries == WRITE_TRIES {
                return Err(format!(
                    "a plain write of {} failed {WRITE_TRIES} times: {}",
                    probe.key(&name),
                    answer.describe()
                ));
            }
            probe.pause(Duration::from_millis(500)).await;
        };
        let written = answer.received;
        let mut first = true;
        loop {
            let read = probe.get(0, &name).await.map_err(|err| err.to_string())?;
            let waited = read.sent.saturating_duration_since(written);
            if read.status == Some(200) && body_id(&read.body) == Some(id) {
                samples.push((waited, first));
                break;
            }
            if waited >= MAX_READ_LAG {
                return Err(format!(
                    "reads did not show a write within {} s ({} still read as {}): the store's reads lag more than \
                     check-s3 waits, so it cannot tell what the store holds",
                    MAX_READ_LAG.as_secs(),
                    probe.key(&name),
                    read.describe()
                ));
            }
            first = false;
            probe.pause(LAG_POLL).await;
        }
    }
    Ok(samples)
}
