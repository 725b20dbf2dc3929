//! A log of who acted for which key, and when, kept by the keys' own work:
//! the evidence a test of keyed writers judges, as the members saw it.
//!
//! Each key's work calls [`ActingLog::start`] when it begins and keeps the
//! guard it gets until it ends; the guard records the stop when dropped, so
//! work that is aborted (its member crashed) still closes its interval.
//! Times come from tokio's clock, so a test on paused time reads the same
//! timeline as the members.
//!
//! ```
//! use hoplock_testkit::acting::ActingLog;
//!
//! let log = ActingLog::default();
//! assert!(log.problems().is_empty());
//! assert!(log.holders().is_empty());
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hoplock::hrw::Round;
use hoplock::keyed::KeyContext;
use tokio::time::Instant;

/// One member incarnation acting for one key, from its start to its stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acting {
    /// The member id.
    pub member: String,
    /// The member's incarnation.
    pub incarnation: String,
    /// The round the key was started at.
    pub round: Round,
    /// When the work began.
    pub start: Instant,
    /// When it ended; `None` while it runs.
    pub stop: Option<Instant>,
}

/// Every key's acting intervals, shared by the work of every member.
#[derive(Clone, Debug, Default)]
pub struct ActingLog(Arc<Mutex<BTreeMap<String, Vec<Acting>>>>);

impl ActingLog {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Vec<Acting>>> {
        // An interval is written in one step, so a poisoned log is still a
        // true one.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `member` started acting for the context's key now. The
    /// guard records the stop when it is dropped, however the work ends.
    pub fn start(&self, member: &str, ctx: &KeyContext) -> ActingGuard {
        self.record(ctx.key(), member, ctx.incarnation(), ctx.round())
    }

    #[allow(clippy::disallowed_methods)] // The log is timed on tokio's clock, which every member shares.
    fn record(&self, key: &str, member: &str, incarnation: &str, round: Round) -> ActingGuard {
        let mut log = self.lock();
        let intervals = log.entry(key.to_owned()).or_default();
        let (member, incarnation) = (member.to_owned(), incarnation.to_owned());
        intervals.push(Acting { member, incarnation, round, start: Instant::now(), stop: None });
        ActingGuard { log: self.clone(), key: key.to_owned(), index: intervals.len() - 1 }
    }

    /// Every key's intervals so far, each key's in start order.
    pub fn intervals(&self) -> BTreeMap<String, Vec<Acting>> {
        let mut all = self.lock().clone();
        for intervals in all.values_mut() {
            intervals.sort_by_key(|acting| acting.start);
        }
        all
    }

    /// The keys held by exactly one running interval now, with its member
    /// and round.
    pub fn holders(&self) -> BTreeMap<String, (String, Round)> {
        self.lock()
            .iter()
            .filter_map(|(key, intervals)| {
                let open: Vec<&Acting> = intervals.iter().filter(|a| a.stop.is_none()).collect();
                (open.len() == 1).then(|| (key.clone(), (open[0].member.clone(), open[0].round)))
            })
            .collect()
    }

    /// The incarnations `member` acted under, sorted.
    pub fn incarnations(&self, member: &str) -> Vec<String> {
        let mut found: Vec<String> =
            self.lock().values().flatten().filter(|a| a.member == member).map(|a| a.incarnation.clone()).collect();
        found.sort();
        found.dedup();
        found
    }

    /// What breaks the single-writer rule: per key, an interval that
    /// starts before the one before it stopped, or a round that does not
    /// rise from one interval to the next. Empty when every key had one
    /// writer at a time.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (key, intervals) in self.intervals() {
            for pair in intervals.windows(2) {
                let (earlier, later) = (&pair[0], &pair[1]);
                match earlier.stop {
                    None => problems.push(format!(
                        "{key}: {} (round {}) never stopped, yet {} (round {}) started",
                        earlier.member, earlier.round, later.member, later.round
                    )),
                    Some(stop) if stop > later.start => problems.push(format!(
                        "{key}: {} (round {}) and {} (round {}) acted at once",
                        earlier.member, earlier.round, later.member, later.round
                    )),
                    Some(_) => {}
                }
                if later.round <= earlier.round {
                    problems.push(format!(
                        "{key}: the round went from {} ({}) to {} ({})",
                        earlier.round, earlier.member, later.round, later.member
                    ));
                }
            }
        }
        problems
    }
}

/// Held by a key's work while it acts; records the stop when dropped.
#[derive(Debug)]
pub struct ActingGuard {
    log: ActingLog,
    key: String,
    index: usize,
}

impl Drop for ActingGuard {
    #[allow(clippy::disallowed_methods)] // The log is timed on tokio's clock, which every member shares.
    fn drop(&mut self) {
        if let Some(acting) = self.log.lock().get_mut(&self.key).and_then(|v| v.get_mut(self.index)) {
            acting.stop = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hoplock::Generation;

    use super::*;

    #[tokio::test(start_paused = true)]
    #[allow(clippy::disallowed_methods)] // Paced on tokio's paused clock, the one the log reads.
    async fn a_handover_after_the_stop_is_clean_and_an_overlap_is_not() {
        let log = ActingLog::default();
        let a = log.record("k", "a", "a-1", Generation(1));
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(a);
        let b = log.record("k", "b", "b-1", Generation(2));
        assert!(log.problems().is_empty(), "{:?}", log.problems());
        assert_eq!(log.holders()["k"], ("b".to_owned(), Generation(2)));
        // c starts while b still acts, at a round no higher than b's.
        let _c = log.record("k", "c", "c-1", Generation(2));
        let problems = log.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("never stopped"), "{problems:?}");
        assert!(problems[1].contains("the round went from 2"), "{problems:?}");
        assert!(log.holders().is_empty(), "two open intervals name no holder");
        drop(b);
        assert_eq!(log.incarnations("b"), ["b-1"]);
    }
}
