//! One history for a run of real processes, on the harness's clock: the
//! proxies' records of every request on the lease key, each process's log
//! lines, the downstream's writes and the faults the harness applied,
//! turned into the simulator's history types so that its checkers judge
//! them unchanged.
//!
//! Every entry is stamped when the harness learns of it: a proxy's record
//! when the store's reply has arrived (after the write committed), a log
//! line when it is read from the process's stderr (a millisecond or so
//! after it was written), a downstream write when the fence judged it. The
//! checkers are told how late a stamp may be (`Recorded::tick_us`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use hoplock::lease::LeaseRecord;
use hoplock_sim::history::{Entry, Event, LossKind, StepReason, StoreOp, StoreOpKind};
use hoplock_sim::node::S3_HOST;
use hoplock_testkit::fault_proxy::Exchange;

/// The shared history of one run.
#[derive(Clone)]
pub struct Recorder {
    origin: Instant,
    entries: Arc<Mutex<Vec<Entry>>>,
    logs: Arc<Mutex<Vec<(String, String)>>>,
}

impl Recorder {
    /// A history whose times count from `origin`.
    pub fn new(origin: Instant) -> Recorder {
        Recorder { origin, entries: Arc::default(), logs: Arc::default() }
    }

    /// When the run began.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The harness's clock: µs since the run began.
    #[allow(clippy::disallowed_methods)] // Real processes, real time.
    pub fn now_us(&self) -> u64 {
        Instant::now().saturating_duration_since(self.origin).as_micros() as u64
    }

    /// Appends `event` at `at_us`.
    pub fn record_at(&self, at_us: u64, node: &str, event: Event) {
        let entry = Entry { at_us, node: node.to_string(), event };
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).push(entry);
    }

    /// Appends `event` now.
    pub fn record(&self, node: &str, event: Event) {
        self.record_at(self.now_us(), node, event);
    }

    /// Keeps a process's log line for the run's record on disk.
    pub fn log(&self, process: &str, line: &str) {
        self.logs.lock().unwrap_or_else(PoisonError::into_inner).push((process.to_string(), line.to_string()));
    }

    /// A copy of every entry so far, in time order.
    pub fn entries(&self) -> Vec<Entry> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner).clone();
        entries.sort_by_key(|entry| entry.at_us);
        entries
    }

    /// Every log line kept, as `(process, line)`.
    pub fn logs(&self) -> Vec<(String, String)> {
        self.logs.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// The store's history entry for one request a proxy forwarded: its time
/// and the operation, if it was a request on the lease object (`path` is
/// `/bucket/key`). A request cut off mid-body was never applied (the store
/// saw half a body) and is left out. A write the store never answered (its
/// connection reset under it) may or may not have been applied: it comes
/// back unapplied with the ETag it would have written, for
/// [`settle_unknown`] to decide.
pub fn store_op(exchange: &Exchange, path: &str, client: &str) -> Option<StoredOp> {
    let target = exchange.target.split('?').next().unwrap_or_default();
    if target != path || exchange.hung_up {
        return None;
    }
    let header = |headers: &[(String, String)], name: &str| {
        headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone())
    };
    let if_match = header(&exchange.request_headers, "if-match");
    let if_none_match = header(&exchange.request_headers, "if-none-match");
    let op = match (exchange.method.as_str(), &if_match, &if_none_match) {
        ("GET" | "HEAD", _, _) => StoreOpKind::Read,
        ("PUT", Some(_), _) => StoreOpKind::Update,
        ("PUT", None, Some(_)) => StoreOpKind::Create,
        ("PUT", None, None) => StoreOpKind::Put,
        ("DELETE", _, _) => StoreOpKind::Delete,
        _ => return None,
    };
    let is_write = op != StoreOpKind::Read;
    let puts = is_write && op != StoreOpKind::Delete;
    let Some(status) = exchange.status else {
        // A read nobody answered tells nothing; a write may have landed.
        if !puts {
            return None;
        }
        let record = LeaseRecord::decode(&exchange.request_body).ok();
        let op = StoreOp {
            client: Some(client.to_string()),
            op,
            expected: if_match,
            generation: record.as_ref().map(|record| record.generation.get()),
            released: record.as_ref().is_some_and(|record| record.released),
            invoked_us: exchange.forwarded_us,
            ended_us: exchange.forwarded_us,
            reply_dropped: true,
            ..StoreOp::default()
        };
        return Some(StoredOp {
            at_us: exchange.forwarded_us,
            op,
            unknown_etag: Some(content_etag(&exchange.request_body)),
        });
    };
    let answered_us = exchange.answered_us.unwrap_or(exchange.forwarded_us);
    let ok = (200..300).contains(&status);
    // A read took effect when it returned a version, as the simulator's
    // store records it; a 404 is a read of nothing, told by its status.
    let applied = if is_write { ok } else { status == 200 };
    let etag = header(&exchange.response_headers, "etag");
    let record = if applied && puts { LeaseRecord::decode(&exchange.request_body).ok() } else { None };
    let op = StoreOp {
        client: Some(client.to_string()),
        op,
        expected: if_match,
        written: if applied && puts { etag.clone() } else { None },
        read: if !is_write && ok { etag } else { None },
        status: exchange.delivered.then_some(status),
        applied,
        generation: record.as_ref().map(|record| record.generation.get()),
        released: record.as_ref().is_some_and(|record| record.released),
        invoked_us: exchange.forwarded_us,
        ended_us: answered_us,
        reply_dropped: !exchange.delivered,
    };
    Some(StoredOp { at_us: answered_us, op, unknown_etag: None })
}

/// A store operation as recorded, before unknown outcomes are settled.
#[derive(Clone, Debug)]
pub struct StoredOp {
    /// When it ended (the reply arrived, or the request went out when no
    /// reply came).
    pub at_us: u64,
    /// The operation.
    pub op: StoreOp,
    /// For a write the store never answered: the ETag it would have
    /// written.
    pub unknown_etag: Option<String>,
}

/// The ETag S3 gives a single-part object: the quoted MD5 of its bytes.
fn content_etag(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    let digest = Md5::digest(body);
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("\"{hex}\"")
}

/// Decides every write the store never answered: it was applied if any
/// other request read its ETag or was conditional on it (the record
/// carries a nonce, so no two writes have one body), and then it landed
/// before the first of those ended (it may have landed while that request
/// was in flight, so no earlier end is known); otherwise nothing shows it
/// landed and it is left out, as a write that did not.
pub fn settle_unknown(mut ops: Vec<StoredOp>) -> Vec<(u64, StoreOp)> {
    let seen: Vec<(u64, String)> = ops
        .iter()
        .flat_map(|op| {
            let tags = [op.op.read.clone(), op.op.expected.clone()];
            tags.into_iter().flatten().map(move |tag| (op.op.ended_us, tag))
        })
        .collect();
    let mut settled = Vec::new();
    for stored in ops.drain(..) {
        match &stored.unknown_etag {
            None => settled.push((stored.at_us, stored.op)),
            Some(etag) => {
                let first = seen.iter().filter(|(_, tag)| tag == etag).map(|(at, _)| *at).min();
                if let Some(first_seen_us) = first {
                    let mut op = stored.op;
                    op.applied = true;
                    op.written = Some(etag.clone());
                    op.ended_us = first_seen_us.max(op.invoked_us);
                    settled.push((op.ended_us, op));
                }
            }
        }
    }
    settled
}

/// What a `hoplock run --log-format json` line says, as history events, and
/// the pid of a command it started.
#[derive(Debug, Default, PartialEq)]
pub struct LogEvents {
    /// Events for the history.
    pub events: Vec<Event>,
    /// The pid of the command the line says was started.
    pub command_pid: Option<i32>,
}

/// Reads one log line. Lines that are not JSON (a panic message, a
/// planted bug's notice) say nothing.
pub fn log_events(line: &str) -> LogEvents {
    let mut out = LogEvents::default();
    let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else { return out };
    let fields = &value["fields"];
    let number = |name: &str| match &fields[name] {
        serde_json::Value::Number(number) => number.as_u64(),
        serde_json::Value::String(text) => text.parse().ok(),
        _ => None,
    };
    let message = fields["message"].as_str().unwrap_or_default();
    let generation = number("generation");
    let reason = fields["reason"].as_str().unwrap_or_default();
    match (message, generation) {
        ("acquired the lease", Some(generation)) => {
            out.events.push(Event::Acquired { generation });
            out.events.push(Event::Announced { generation, armed: false });
        }
        ("renewed the lease", Some(generation)) => out.events.push(Event::Renewed { generation }),
        ("lost the lease", Some(generation)) => {
            out.events.push(Event::Lost { generation, reason: loss_kind(reason) });
        }
        ("released the lease", Some(generation)) => {
            out.events.push(Event::Lost { generation, reason: LossKind::Released });
        }
        ("stopped leading; release not confirmed", Some(generation)) => {
            out.events.push(Event::Lost { generation, reason: LossKind::ReleaseUnconfirmed });
        }
        ("the command stopped", Some(generation)) => {
            out.events.push(Event::Stepped { generation, reason: StepReason::Cancelled });
        }
        ("the command exited by itself", Some(generation)) => {
            out.events.push(Event::Stepped { generation, reason: StepReason::Released });
        }
        ("started the command", _) => out.command_pid = number("pid").and_then(|pid| i32::try_from(pid).ok()),
        _ => {}
    }
    out
}

/// The kind of a loss reason as the elector's `Display` words it.
fn loss_kind(reason: &str) -> LossKind {
    const KINDS: [(&str, LossKind); 6] = [
        ("renewals did not succeed", LossKind::Expired),
        ("another writer replaced", LossKind::Superseded),
        ("the lease record was deleted", LossKind::Deleted),
        ("the store failed", LossKind::Failed),
        ("the release was not confirmed", LossKind::ReleaseUnconfirmed),
        ("the term was dropped", LossKind::Abandoned),
    ];
    KINDS.iter().find(|(prefix, _)| reason.starts_with(prefix)).map_or(LossKind::Other, |(_, kind)| *kind)
}

/// The process that sent a request: `node#incarnation`, the incarnation
/// being the node's last process started before the connection it came on
/// was accepted. `started` is every `(µs, incarnation)` the node started.
pub fn client_of(node: &str, started: &[(u64, u32)], accepted_us: u64) -> String {
    let incarnation = started.iter().filter(|(at, _)| *at <= accepted_us).map(|(_, k)| *k).max().unwrap_or(0);
    format!("{node}#{incarnation}")
}

/// The node a store entry is recorded under.
pub const STORE: &str = S3_HOST;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_become_the_simulators_events() {
        let line = |message: &str, extra: &str| {
            format!(
                r#"{{"timestamp":"t","level":"INFO","fields":{{"message":"{message}","owner":"a"{extra}}},"target":"hoplock"}}"#
            )
        };
        assert_eq!(
            log_events(&line("acquired the lease", r#","generation":"3""#)).events,
            [Event::Acquired { generation: 3 }, Event::Announced { generation: 3, armed: false }]
        );
        assert_eq!(
            log_events(&line(
                "lost the lease",
                r#","generation":"3","reason":"another writer replaced the lease record""#
            ))
            .events,
            [Event::Lost { generation: 3, reason: LossKind::Superseded }]
        );
        assert_eq!(
            log_events(&line("the command stopped", r#","generation":"4""#)).events,
            [Event::Stepped { generation: 4, reason: StepReason::Cancelled }]
        );
        assert_eq!(log_events(&line("started the command", r#","generation":"4","pid":812"#)).command_pid, Some(812));
        assert_eq!(log_events("hoplock: planted bug x is active"), LogEvents::default());
        assert_eq!(log_events(&line("acquired the lease", "")), LogEvents::default());
    }

    fn exchange(method: &str, headers: &[(&str, &str)], status: Option<u16>, body: &str) -> Exchange {
        Exchange {
            connection: 1,
            accepted_us: 1,
            method: method.into(),
            target: "/bucket/lease".into(),
            request_headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            request_body: bytes::Bytes::from(body.to_string()),
            forwarded_us: 10,
            status,
            response_headers: vec![("etag".into(), "\"e1\"".into())],
            response_body: bytes::Bytes::new(),
            answered_us: status.map(|_| 20),
            delivered: true,
            hung_up: false,
        }
    }

    #[test]
    fn proxied_requests_become_store_operations() {
        let record = LeaseRecord::reset(hoplock::Generation(5), "n");
        let body = String::from_utf8(record.encode()).unwrap();
        let StoredOp { at_us: at, op, .. } =
            store_op(&exchange("PUT", &[("if-match", "\"e0\"")], Some(200), &body), "/bucket/lease", "a#0")
                .expect("a write on the lease key");
        assert_eq!((at, op.op, op.applied, op.generation, op.released), (20, StoreOpKind::Update, true, Some(5), true));
        assert_eq!((op.expected.as_deref(), op.written.as_deref()), (Some("\"e0\""), Some("\"e1\"")));
        let refused =
            store_op(&exchange("PUT", &[("if-none-match", "*")], Some(412), &body), "/bucket/lease", "a#0").unwrap().op;
        assert_eq!((refused.op, refused.applied, refused.written), (StoreOpKind::Create, false, None));
        let read = store_op(&exchange("GET", &[], Some(200), ""), "/bucket/lease", "a#0").unwrap().op;
        assert_eq!(read.read.as_deref(), Some("\"e1\""));
        // A read that returned a version took effect; a 404 did not.
        assert!(read.applied);
        let missing = store_op(&exchange("GET", &[], Some(404), ""), "/bucket/lease", "a#0").unwrap().op;
        assert!(!missing.applied && missing.status == Some(404) && missing.read.is_none());
        assert!(store_op(&exchange("GET", &[], Some(200), ""), "/bucket/other", "a#0").is_none());
        assert!(store_op(&exchange("GET", &[], None, ""), "/bucket/lease", "a#0").is_none());
        let mut dropped = exchange("PUT", &[("if-none-match", "*")], Some(200), &body);
        dropped.delivered = false;
        let dropped = store_op(&dropped, "/bucket/lease", "a#0").unwrap().op;
        assert!(dropped.applied && dropped.reply_dropped && dropped.status.is_none());
    }

    #[test]
    fn a_request_belongs_to_the_process_that_opened_its_connection() {
        let started = [(0, 0), (5_000, 1), (9_000, 2)];
        assert_eq!(client_of("a", &started, 4_999), "a#0");
        assert_eq!(client_of("a", &started, 5_000), "a#1");
        assert_eq!(client_of("a", &started, 12_000), "a#2");
    }

    #[test]
    fn an_unanswered_write_counts_only_if_someone_saw_it() {
        let record = LeaseRecord::reset(hoplock::Generation(5), "n");
        let body = String::from_utf8(record.encode()).unwrap();
        let unanswered = store_op(&exchange("PUT", &[("if-match", "\"e0\"")], None, &body), "/bucket/lease", "a#0")
            .expect("an unanswered write is kept to be settled");
        let etag = unanswered.unknown_etag.clone().expect("its would-be ETag");
        assert_eq!(etag, content_etag(body.as_bytes()));
        // Nobody saw it: left out.
        assert!(settle_unknown(vec![unanswered.clone()]).is_empty());
        // A later read saw it: applied, ending by the time that read ended.
        let mut read = store_op(&exchange("GET", &[], Some(200), ""), "/bucket/lease", "b#0").unwrap();
        read.op.read = Some(etag.clone());
        (read.op.invoked_us, read.op.ended_us) = (40, 55);
        let settled = settle_unknown(vec![unanswered, read]);
        let (at, op) = &settled[0];
        assert!(op.applied && op.written.as_deref() == Some(etag.as_str()));
        assert_eq!((*at, op.ended_us), (55, 55));
    }
}
