//! The linearizability audit: several clients read the object and swap it
//! on what they read, all at once; the writes must fit one atomic register.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hoplock::clock::{Clock, Instant};
use hoplock_testkit::linearizability::{Call, Checker, Operation, Outcome, Verdict as Linearity};
use tokio::task::JoinSet;

use super::{AUDIT_BYTES, Fatal, Run};
use crate::check_s3::probe::{Condition, Probe, body, body_id};
use crate::check_s3::report::{Check, Verdict};

/// The audit is judged only on at least this many successful conditional
/// writes...
pub const MIN_AUDIT_WRITES: usize = 50;

/// ...and this many reads.
pub const MIN_AUDIT_READS: usize = 100;

/// Steps one auditing client takes at most, should the minimums never be
/// reached (a store that refuses most writes), unless `--rounds` asks for
/// more.
const MAX_AUDIT_STEPS: u64 = 400;

/// What all auditing clients have gathered so far.
#[derive(Default)]
struct Gathered {
    successes: AtomicUsize,
    reads: AtomicUsize,
}

impl Gathered {
    fn enough(&self) -> bool {
        self.successes.load(Ordering::Relaxed) >= MIN_AUDIT_WRITES
            && self.reads.load(Ordering::Relaxed) >= MIN_AUDIT_READS
    }
}

impl Run<'_> {
    /// Several clients read the object and swap it on what they read, all
    /// at once; the writes must fit one atomic register.
    pub(super) async fn linearizability(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "linearizability";
        self.begin(NAME);
        let base = self.put("audit", &Condition::None, body(&self.report.prefix, "audit", 1, AUDIT_BYTES)).await?;
        if !base.succeeded() {
            self.push(Check::skipped(NAME, format!("could not write the object: {}", base.describe())));
            return Ok(());
        }
        // The clients start from reads: they must show the object.
        self.probe.pause(self.lag.wait()).await;
        let clients = self.settings.concurrency.clamp(2, 8) as u64;
        let steps = u64::from(self.settings.rounds.max(4));
        let most = MAX_AUDIT_STEPS.max(steps);
        let origin = self.probe.clock().now();
        let gathered = Arc::new(Gathered::default());
        let mut auditors = JoinSet::new();
        for client in 0..clients {
            let probe = self.probe.clone();
            let prefix = self.report.prefix.clone();
            auditors.spawn(audit_client(probe, prefix, client, (steps, most), origin, gathered.clone()));
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
        // A read that returned a refused write is evidence for the settle
        // pass, as any other read-back's.
        for op in &history {
            if let (Call::Read, Some(Outcome::Value(id))) = (&op.call, op.outcome()) {
                self.note_if_refused("audit", Some(id));
            }
        }
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
            (Linearity::Unknown { steps }, None) => Check::skipped(
                NAME,
                format!("not judged: the checker's budget ran out after {steps} steps ({evidence})"),
            ),
            (Linearity::Linearizable { .. }, None) if ok < MIN_AUDIT_WRITES || reads < MIN_AUDIT_READS => {
                Check::skipped(
                    NAME,
                    format!(
                        "not judged: linearizable, but on too little evidence ({evidence}; at least {MIN_AUDIT_WRITES} \
                     successful conditional writes and {MIN_AUDIT_READS} reads are needed)"
                    ),
                )
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

/// One auditing client: read, then swap what was read, at least `steps`
/// times and until the clients together have gathered the minimum
/// evidence. After a successful write the client swaps on to the object
/// its write made, with the ETag the answer carried, as an elector renews
/// its lease: a store whose reads lag still gets writes to judge.
async fn audit_client(
    probe: Probe,
    prefix: String,
    client: u64,
    (steps, most): (u64, u64),
    origin: Instant,
    gathered: Arc<Gathered>,
) -> Audit {
    let nanos = |at: Instant| at.saturating_duration_since(origin).as_nanos() as u64;
    let mut audit = Audit::default();
    let mut own: Option<(u64, String)> = None;
    for step in 0..most {
        if step >= steps && gathered.enough() {
            break;
        }
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
            gathered.reads.fetch_add(1, Ordering::Relaxed);
        }
        let from_read = seen.zip(read.etag.clone());
        let Some((expected, etag)) = own.take().or(from_read) else { continue };
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
                gathered.successes.fetch_add(1, Ordering::Relaxed);
                own = write.etag.clone().map(|etag| (new, etag));
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
