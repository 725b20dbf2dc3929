//! `hoplock check --store URL`: whether any conditional store (GCS, Azure,
//! S3) honours its preconditions, judged through the object seam the
//! electors use.
//!
//! The checks are the validator's that apply to every store: create,
//! compare-and-swap, a condition on a missing object, read after write,
//! racing creates and racing swaps with read-back, and a linearizability
//! audit of several clients reading and swapping one object. The verdicts
//! and exit codes are `check-s3`'s. An `s3://` URL runs `check-s3` itself,
//! which also checks what only S3 has (ETag forms, bodies sent slowly,
//! signatures).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser};
use hoplock::backend::{BackendError, ObjectBackend, Version};
use hoplock::clock::{Clock, SystemClock};
use hoplock::entropy::{Entropy, OsEntropy};
use hoplock::store::{Store, StoreOptions, StoreUrl};
use hoplock_testkit::linearizability::{Call, Checker, Operation, Outcome};

use crate::store::parse_duration;

/// Options of `hoplock check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Where to write test objects: s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or
    /// az://CONTAINER/PREFIX[?account=NAME]. Objects are written under the
    /// prefix and deleted afterwards.
    #[arg(long, value_name = "URL")]
    pub store: String,
    /// The store's endpoint URL (an emulator, a private endpoint).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Race rounds for the racing creates and swaps.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub rounds: u32,
    /// Writers racing in each round.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=256))]
    pub concurrency: u32,
    /// How long one request may take.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub request_timeout: Duration,
}

/// The verdicts, worst last, with `check-s3`'s exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Safe,
    Unsupported,
    WeakVersions,
    IgnoresConditions,
    NotAtomic,
}

impl Verdict {
    fn code(self) -> u8 {
        match self {
            Verdict::Safe => 0,
            Verdict::Unsupported => 4,
            Verdict::IgnoresConditions => 5,
            Verdict::NotAtomic => 6,
            Verdict::WeakVersions => 7,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Verdict::Safe => "SAFE",
            Verdict::Unsupported => "UNSUPPORTED",
            Verdict::IgnoresConditions => "UNSAFE: ignores conditions",
            Verdict::NotAtomic => "UNSAFE: not atomic",
            Verdict::WeakVersions => "UNSAFE: weak versions",
        }
    }
}

/// One row of the report.
struct Row {
    name: &'static str,
    verdict: Verdict,
    evidence: String,
}

/// Runs the checks and prints the report; returns the exit code.
pub async fn run(args: CheckArgs, out: &mut impl Write) -> Result<u8, String> {
    let url: StoreUrl = args.store.parse().map_err(|err: BackendError| err.to_string())?;
    if let StoreUrl::S3 { bucket, key } = &url {
        return check_s3(&args, bucket, key, out).await;
    }
    let mut options = StoreOptions::default();
    options.endpoint.clone_from(&args.endpoint);
    options.request_timeout = args.request_timeout;
    let base = Store::open(&url, &options).map_err(|err| err.to_string())?;
    let prefix = format!("{}.hoplock-check-{:08x}/", base.key().trim_end_matches('/'), OsEntropy.next_u64() as u32);
    writeln!(out, "checking {url} (objects under {prefix})").map_err(|err| err.to_string())?;
    let run = Run::new(prefix, move |key| base.with_key(key));
    let (rows, verdict) = run.judge(args.rounds, args.concurrency).await?;
    report(&rows, verdict, out)?;
    Ok(verdict.code())
}

/// Prints the rows and the verdict.
fn report(rows: &[Row], verdict: Verdict, out: &mut impl Write) -> Result<(), String> {
    let width = rows.iter().map(|row| row.name.len()).max().unwrap_or(0);
    for row in rows {
        let mark = if row.verdict == Verdict::Safe { "pass" } else { "FAIL" };
        writeln!(out, "{:width$}  {mark}  {}", row.name, row.evidence).map_err(|err| err.to_string())?;
    }
    writeln!(out, "verdict: {}", verdict.name()).map_err(|err| err.to_string())
}

/// `hoplock check-s3` with the bucket and prefix of an `s3://` URL.
async fn check_s3(args: &CheckArgs, bucket: &str, prefix: &str, out: &mut impl Write) -> Result<u8, String> {
    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: crate::check_s3::CheckArgs,
    }
    let rounds = args.rounds.to_string();
    let concurrency = args.concurrency.to_string();
    let mut argv = vec!["check-s3", "--bucket", bucket, "--prefix", prefix, "--rounds", &rounds];
    argv.extend(["--concurrency", &concurrency]);
    if let Some(endpoint) = &args.endpoint {
        argv.extend(["--endpoint", endpoint]);
    }
    let wrapper = Wrapper::try_parse_from(argv).map_err(|err| err.to_string())?;
    crate::check_s3::run(wrapper.args, out).await.map_err(|err| err.to_string())
}

/// One check run: the objects it writes, each opened by key.
struct Run<O> {
    open: Box<dyn Fn(String) -> O + Send + Sync>,
    prefix: String,
    written: Mutex<Vec<String>>,
    clock: SystemClock,
}

impl<O: ObjectBackend + Clone> Run<O> {
    fn new(prefix: String, open: impl Fn(String) -> O + Send + Sync + 'static) -> Run<O> {
        Run { open: Box::new(open), prefix, written: Mutex::default(), clock: SystemClock::new() }
    }

    /// Runs every check, cleans up, and returns the rows and the verdict.
    async fn judge(&self, rounds: u32, concurrency: u32) -> Result<(Vec<Row>, Verdict), String> {
        let mut rows = Vec::new();
        let result = self.all(rounds, concurrency, &mut rows).await;
        self.clean_up().await;
        result?;
        let verdict = rows.iter().map(|row| row.verdict).max().unwrap_or(Verdict::Safe);
        Ok((rows, verdict))
    }

    fn object(&self, name: &str) -> O {
        let key = format!("{}{name}", self.prefix);
        self.written.lock().unwrap_or_else(|poison| poison.into_inner()).push(key.clone());
        (self.open)(key)
    }

    /// Deletes what the checks wrote, best effort.
    async fn clean_up(&self) {
        let keys = std::mem::take(&mut *self.written.lock().unwrap_or_else(|poison| poison.into_inner()));
        for key in keys {
            let object = (self.open)(key);
            if let Ok(found) = object.read_object().await {
                let _ = object.delete_object(&found.version).await;
            }
        }
    }

    async fn all(&self, rounds: u32, concurrency: u32, rows: &mut Vec<Row>) -> Result<(), String> {
        self.sequential(rows).await?;
        if rows.iter().any(|row| row.verdict == Verdict::Unsupported) {
            return Ok(());
        }
        rows.push(self.race("racing creates", rounds, concurrency, false).await?);
        rows.push(self.race("racing compare-and-swaps", rounds, concurrency, true).await?);
        rows.push(self.audit(rounds, concurrency).await?);
        Ok(())
    }

    /// Create, compare-and-swap, a condition on a missing object, and read
    /// after write, one request at a time.
    async fn sequential(&self, rows: &mut Vec<Row>) -> Result<(), String> {
        let object = self.object("sequential");
        let mut row = |name, verdict, evidence: String| rows.push(Row { name, verdict, evidence });
        let first = match object.write_object(None, body(1)).await {
            Ok(version) => version,
            Err(BackendError::Unsupported(why)) => {
                row("create", Verdict::Unsupported, why);
                return Ok(());
            }
            Err(error) => return Err(format!("the first create failed: {error}")),
        };
        match object.write_object(None, body(2)).await {
            Ok(_) => row("create", Verdict::IgnoresConditions, "a create of an existing object succeeded".into()),
            Err(BackendError::LeaseHeld) => {
                row("create", Verdict::Safe, "a create of an existing object was refused".into())
            }
            Err(error) => return Err(format!("the second create failed: {error}")),
        }
        let second = object.write_object(Some(&first), body(3)).await.map_err(|e| format!("a swap failed: {e}"))?;
        let stale = object.write_object(Some(&first), body(4)).await;
        match (&stale, second == first) {
            (_, true) => row("compare-and-swap", Verdict::WeakVersions, format!("two writes got version {first}")),
            (Ok(_), _) => {
                row("compare-and-swap", Verdict::IgnoresConditions, "a swap at a replaced version succeeded".into())
            }
            (Err(BackendError::LeaseHeld | BackendError::NoLease), _) => row(
                "compare-and-swap",
                Verdict::Safe,
                "a swap at the current version succeeded, at a replaced one was refused".into(),
            ),
            (Err(error), _) => return Err(format!("a stale swap failed: {error}")),
        }
        let read = object.read_object().await.map_err(|e| format!("a read failed: {e}"))?;
        if read.bytes == body(3) && read.version == second {
            row("read after write", Verdict::Safe, "the read returned the last write and its version".into());
        } else {
            row("read after write", Verdict::NotAtomic, "the read did not return the last write".into());
        }
        let missing = self.object("missing");
        let nowhere = Version::new(format!("1{}", OsEntropy.next_u64() % 1_000_000_000_000_000));
        let created = missing.write_object(Some(&nowhere), body(5)).await.is_ok()
            || !matches!(missing.read_object().await, Err(BackendError::NoLease));
        if created {
            row(
                "condition on a missing object",
                Verdict::IgnoresConditions,
                "a swap of a missing object created it".into(),
            );
        } else {
            row("condition on a missing object", Verdict::Safe, "refused; nothing was created".into());
        }
        Ok(())
    }

    /// `args.rounds` rounds of writers racing to create a fresh object, or
    /// to swap one version: exactly one wins each round, and a read after
    /// the round returns the winner's bytes.
    async fn race(&self, name: &'static str, rounds: u32, concurrency: u32, swap: bool) -> Result<Row, String> {
        let mut problems = Vec::new();
        for round in 0..rounds {
            let object = self.object(&format!("{}-{round}", if swap { "swap" } else { "create" }));
            let base = if swap {
                Some(
                    object
                        .write_object(None, body(0))
                        .await
                        .map_err(|e| format!("{name}: the base write failed: {e}"))?,
                )
            } else {
                None
            };
            let racers = (0..concurrency).map(|i| {
                let (object, base) = (object.clone(), base.clone());
                tokio::spawn(async move { object.write_object(base.as_ref(), body(u64::from(i) + 1)).await })
            });
            let mut winners = Vec::new();
            for (i, racer) in racers.collect::<Vec<_>>().into_iter().enumerate() {
                match racer.await.map_err(|e| e.to_string())? {
                    Ok(version) => winners.push((i as u64 + 1, version)),
                    Err(BackendError::LeaseHeld | BackendError::NoLease | BackendError::Conflict(_)) => {}
                    Err(error) => problems.push(format!("round {round}: a racer failed: {error}")),
                }
            }
            let read = match object.read_object().await {
                Ok(read) => read,
                Err(BackendError::NoLease) => {
                    problems.push(format!("round {round}: the read-back found no object after a write won"));
                    continue;
                }
                Err(error) => return Err(format!("{name}: the read-back failed: {error}")),
            };
            match &winners[..] {
                [(id, version)] if read.bytes == body(*id) && read.version == *version => {}
                [_] => problems.push(format!("round {round}: the read-back is not the winner's write")),
                _ => problems.push(format!("round {round}: {} of {concurrency} writers won", winners.len())),
            }
        }
        let what = format!("{rounds} rounds of {concurrency} writers");
        Ok(match problems.first() {
            None => Row { name, verdict: Verdict::Safe, evidence: format!("{what}: one winner each, read back whole") },
            Some(first) => Row {
                name,
                verdict: Verdict::NotAtomic,
                evidence: format!("{what}: {} problems, the first: {first}", problems.len()),
            },
        })
    }

    /// Several clients read the object and swap it at the version they
    /// read; the history is judged by the linearizability checker.
    async fn audit(&self, rounds: u32, concurrency: u32) -> Result<Row, String> {
        const NAME: &str = "linearizability";
        let object = self.object("audit");
        let first =
            object.write_object(None, body(0)).await.map_err(|e| format!("{NAME}: the first write failed: {e}"))?;
        let shared = Arc::new(Audit {
            object,
            origin: self.clock.now(),
            clock: SystemClock::new(),
            history: Mutex::default(),
            ids: Mutex::new(BTreeMap::from([(first.as_str().to_owned(), 0)])),
        });
        let clients = concurrency.min(8);
        let tasks: Vec<_> = (0..clients)
            .map(|client| {
                let shared = shared.clone();
                let rounds = rounds.min(25);
                tokio::spawn(async move { shared.client(u64::from(client), rounds).await })
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| e.to_string())?;
        }
        let history = std::mem::take(&mut *shared.history.lock().unwrap_or_else(|poison| poison.into_inner()));
        let writes = history.iter().filter(|op| !matches!(op.call, Call::Read)).count();
        let applied = history
            .iter()
            .filter(|op| {
                matches!(op.reply, hoplock_testkit::linearizability::Reply::Received { outcome: Outcome::Ok, .. })
            })
            .count();
        if applied == 0 {
            // On any honest store some swap at a version just read wins;
            // none winning says the store did not serve the audit at all.
            return Ok(Row {
                name: NAME,
                verdict: Verdict::NotAtomic,
                evidence: format!("no swap at a version just read succeeded in {} operations", history.len()),
            });
        }
        let verdict = Checker::new().initial_state(Some(0)).check(&history).map_err(|e| format!("{NAME}: {e}"))?;
        let evidence = format!("{} operations by {clients} clients, {writes} of them writes", history.len());
        Ok(if verdict.is_linearizable() {
            Row { name: NAME, verdict: Verdict::Safe, evidence: format!("linearizable: {evidence}") }
        } else if verdict.is_violation() {
            Row { name: NAME, verdict: Verdict::NotAtomic, evidence: format!("not linearizable: {evidence}") }
        } else {
            Row {
                name: NAME,
                verdict: Verdict::Safe,
                evidence: format!("not judged within the step budget: {evidence}"),
            }
        })
    }
}

/// The audit's shared state: the object, the history and which write each
/// store version holds.
struct Audit<O> {
    object: O,
    origin: hoplock::clock::Instant,
    clock: SystemClock,
    history: Mutex<Vec<Operation>>,
    ids: Mutex<BTreeMap<String, u64>>,
}

impl<O: ObjectBackend> Audit<O> {
    fn now(&self) -> u64 {
        self.clock.now().saturating_duration_since(self.origin).as_micros() as u64
    }

    fn record(&self, operation: Operation) {
        self.history.lock().unwrap_or_else(|poison| poison.into_inner()).push(operation);
    }

    async fn client(&self, client: u64, rounds: u32) {
        for round in 0..u64::from(rounds) {
            let invoke = self.now();
            let read = match self.object.read_object().await {
                Ok(read) => read,
                // The object exists throughout: a read that misses it is
                // evidence for the checker, not a failure to skip.
                Err(BackendError::NoLease) => {
                    self.record(Operation::completed(client, Call::Read, invoke, self.now(), Outcome::Missing));
                    continue;
                }
                Err(_) => continue,
            };
            let Some(id) = body_id(&read.bytes) else {
                continue;
            };
            self.ids.lock().unwrap_or_else(|poison| poison.into_inner()).insert(read.version.as_str().to_owned(), id);
            self.record(Operation::completed(client, Call::Read, invoke, self.now(), Outcome::Value(id)));
            let new = 1000 * (client + 1) + round + 1;
            let call = Call::Update { expected: id, new };
            let invoke = self.now();
            match self.object.write_object(Some(&read.version), body(new)).await {
                Ok(version) => {
                    self.ids
                        .lock()
                        .unwrap_or_else(|poison| poison.into_inner())
                        .insert(version.as_str().to_owned(), new);
                    self.record(Operation::completed(client, call, invoke, self.now(), Outcome::Ok));
                }
                Err(BackendError::LeaseHeld | BackendError::NoLease | BackendError::Conflict(_)) => {
                    self.record(Operation::completed(client, call, invoke, self.now(), Outcome::Refused));
                }
                Err(_) => self.record(Operation::indeterminate(client, call, invoke)),
            }
        }
    }
}

/// A write's body: its id, padded to a fixed length.
fn body(id: u64) -> Vec<u8> {
    format!("hoplock check write {id:>20}\n").into_bytes()
}

/// The id a body of [`body`] carries.
fn body_id(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.strip_prefix("hoplock check write ")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use hoplock::backend::memory::MemoryBackend;
    use hoplock::backend::{BackendError, ObjectBackend, StoredObject, Version};

    use super::{Run, Verdict};

    /// A bucket of memory objects, one per key.
    #[derive(Clone, Default)]
    struct Bucket(Arc<Mutex<BTreeMap<String, MemoryBackend>>>);

    impl Bucket {
        fn open(&self, key: String) -> MemoryBackend {
            self.0.lock().unwrap().entry(key).or_default().clone()
        }
    }

    /// How a broken provider misbehaves.
    #[derive(Clone, Copy, PartialEq)]
    enum Fault {
        /// Every write is stored, whatever its condition.
        IgnoresConditions,
        /// Reads return the object as it was before the last write that
        /// succeeded (missing, if it was).
        StaleReads,
    }

    #[derive(Clone)]
    struct Broken {
        store: MemoryBackend,
        fault: Fault,
        /// With `StaleReads`, what reads return once a write succeeded.
        previous: Arc<Mutex<Option<Option<StoredObject>>>>,
    }

    impl ObjectBackend for Broken {
        async fn read_object(&self) -> Result<StoredObject, BackendError> {
            let current = self.store.read_object().await;
            match (self.fault, self.previous.lock().unwrap().clone()) {
                (Fault::StaleReads, Some(Some(previous))) => Ok(previous),
                (Fault::StaleReads, Some(None)) => Err(BackendError::NoLease),
                _ => current,
            }
        }

        async fn write_object(&self, expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
            let before = self.store.read_object().await.ok();
            let written = match self.fault {
                Fault::IgnoresConditions => Ok(self.store.put_raw(bytes)),
                Fault::StaleReads => self.store.write_object(expected, bytes).await,
            };
            if written.is_ok() {
                *self.previous.lock().unwrap() = Some(before);
            }
            written
        }

        async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
            self.store.delete_object(expected).await
        }
    }

    fn broken(fault: Fault) -> Run<Broken> {
        let bucket = Bucket::default();
        type Previous = Arc<Mutex<Option<Option<StoredObject>>>>;
        let previous: Arc<Mutex<BTreeMap<String, Previous>>> = Arc::default();
        Run::new("check/".into(), move |key: String| Broken {
            store: bucket.open(key.clone()),
            fault,
            previous: previous.lock().unwrap().entry(key).or_default().clone(),
        })
    }

    fn verdicts(rows: &[super::Row]) -> Vec<(&'static str, Verdict)> {
        rows.iter().map(|row| (row.name, row.verdict)).collect()
    }

    #[tokio::test]
    async fn an_honest_store_is_safe_on_every_check() {
        let bucket = Bucket::default();
        let run = Run::new("check/".into(), move |key| bucket.open(key));
        let (rows, verdict) = run.judge(5, 8).await.unwrap();
        assert_eq!(verdict, Verdict::Safe, "{:?}", verdicts(&rows));
        assert_eq!(rows.len(), 7);
    }

    #[tokio::test]
    async fn a_store_that_ignores_conditions_fails_the_checks_for_them() {
        let (rows, verdict) = broken(Fault::IgnoresConditions).judge(5, 8).await.unwrap();
        let found = verdicts(&rows);
        for check in ["create", "compare-and-swap", "condition on a missing object"] {
            assert!(found.contains(&(check, Verdict::IgnoresConditions)), "{check}: {found:?}");
        }
        for check in ["racing creates", "racing compare-and-swaps"] {
            assert!(found.contains(&(check, Verdict::NotAtomic)), "{check}: {found:?}");
        }
        assert_eq!(verdict.code(), 6);
    }

    #[tokio::test]
    async fn reads_that_miss_the_last_write_fail_read_after_write_and_the_audit() {
        let (rows, verdict) = broken(Fault::StaleReads).judge(5, 8).await.unwrap();
        let found = verdicts(&rows);
        assert!(found.contains(&("read after write", Verdict::NotAtomic)), "{found:?}");
        assert!(found.contains(&("racing creates", Verdict::NotAtomic)), "{found:?}");
        assert!(found.contains(&("linearizability", Verdict::NotAtomic)), "{found:?}");
        assert_eq!(verdict, Verdict::NotAtomic);
    }
}
