//! Everything that happened in a run, in simulated time order.
//!
//! The checkers read only this. Entries are appended from the hosts'
//! software and from the runner, all on the simulation's one thread, so the
//! order is the order things happened in.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::world::Action;

/// The name the store's history gives the schedule's own writes.
pub const OPERATOR: &str = "operator";

/// How the history labels an action the runner skipped.
pub const SKIPPED: &str = "skipped: ";

/// A scheduled action as the history records it. It is written as its
/// label (`stop a`, `partition a s3`, `skipped: crash @leader (nobody
/// leads)`), and read by matching on the action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The runner applied it.
    Applied(Action),
    /// It was aimed at `@leader` while nobody led, so the runner skipped it.
    Skipped(Action),
}

impl Fault {
    /// The action, if the runner applied it.
    pub fn applied(&self) -> Option<&Action> {
        match self {
            Fault::Applied(action) => Some(action),
            Fault::Skipped(_) => None,
        }
    }

    /// How the history names it.
    pub fn label(&self) -> String {
        match self {
            Fault::Applied(action) => action.label(),
            Fault::Skipped(action) => format!("{SKIPPED}{} (nobody leads)", action.label()),
        }
    }
}

impl Serialize for Fault {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.label())
    }
}

/// One thing that happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Simulated time since the start, in microseconds.
    pub at_us: u64,
    /// Where: a node name, `s3`, or `world` for the runner.
    pub node: String,
    /// What.
    pub event: Event,
}

/// The kinds of entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A node process started (`incarnation` counts restarts from 0).
    Started { incarnation: u32 },
    /// The runner crashed the node.
    Crashed,
    /// The node's leader context was handed out: it believes it leads.
    Acquired { generation: u64 },
    /// A renewal succeeded.
    Renewed { generation: u64 },
    /// The node's leader context was cancelled (or the term released).
    Stepped { generation: u64, reason: StepReason },
    /// The elector's event stream announced a term (`Event::Acquired`, as
    /// a subscriber sees it); `armed` is whether the subscriber's copy of
    /// the work guard holds the release back (it must not).
    Announced { generation: u64, armed: bool },
    /// `Elector::run` handed the workload a term's work guard; `armed` is
    /// whether it holds the release back (it must).
    GuardHandedOut { generation: u64, armed: bool },
    /// The elector's event stream reported the end of a term
    /// (`Event::Lost`); `reason` is the loss reason's kind, or `released`
    /// for a confirmed release.
    Lost { generation: u64, reason: LossKind },
    /// Non-fatal trouble the elector reported.
    ElectorError { message: String },
    /// The node's campaign ended with an error: it will not lead again in
    /// this process.
    CampaignEnded { message: String },
    /// `Elector::observe`, called at `started_us`, reported this generation
    /// and the record unchanged for `unchanged_for_us` on the node's clock
    /// (L2: a node's observed generations never go down; L3: reports are
    /// true of the store).
    Observed { generation: u64, started_us: u64, unchanged_for_us: u64 },
    /// `Elector::observe`, called at `started_us`, reported no record.
    ObservedNothing { started_us: u64 },
    /// `Elector::observe`, called at `started_us`, refused a record because
    /// its generation `found` is below the `seen` one.
    ObservedGoingBack { seen: u64, found: u64, started_us: u64 },
    /// A write reached the fenced downstream resource. `sequence` is the
    /// order the resource stored its writes in: hosts' clocks may differ
    /// within one tick, so time alone cannot say which came first.
    Downstream { generation: u64, accepted: bool, highest_before: u64, sequence: u64 },
    /// The fake S3 handled a request on the lease key.
    Store(StoreOp),
    /// The runner applied a scheduled action, or skipped one.
    Fault { action: Fault },
    /// The node was paused until `until_us`.
    Paused { until_us: u64 },
    /// The node's host was suspended until `until_us`. A term that ended in
    /// its sleep may still be believed until `stops_by_us` (the suspend
    /// bound, I9a): until then it counts as paused, as a process that has
    /// not run yet.
    Suspended { until_us: u64, stops_by_us: u64 },
    /// A keyed member incarnation started acting for key `k{key}`, fenced
    /// by `round`.
    KeyStarted { key: u32, round: u64, incarnation: String },
    /// It stopped acting for the key: its work saw the context cancelled
    /// and wound down, or (`aborted`) it was dropped before it had: the
    /// member aborted it, its term's guard ended it, or its host crashed.
    KeyStopped {
        key: u32,
        round: u64,
        incarnation: String,
        #[serde(default)]
        aborted: bool,
    },
    /// A keyed member's work wrote key `k{key}` downstream, fenced by
    /// `round`: sent at `sent_us`, recorded when it arrived. `sequence` is
    /// the order the downstream stored its writes in (shared with
    /// [`Event::Downstream`]).
    KeyDownstream {
        key: u32,
        round: u64,
        incarnation: String,
        sent_us: u64,
        accepted: bool,
        highest_before: u64,
        sequence: u64,
    },
    /// A write of the membership object applied: the view it made, the
    /// member ids it lists, and the change that made it (`join`, `leave`,
    /// `evict`) with the entry concerned.
    View { view: u64, members: Vec<String>, change: String, entry: String },
    /// A keyed member's handle was asked what it holds: `Leases::acquire`
    /// for `k{key}` (the round of the lease it handed out, or the holder it
    /// named, or neither when it refused), `Membership::members` (`None`
    /// when it refused) and its snapshot's view and term.
    HandleProbe {
        key: u32,
        incarnation: String,
        lease: Option<u64>,
        holder: Option<String>,
        members: Option<Vec<String>>,
        view: Option<u64>,
        term_holds: bool,
    },
}

/// The `ElectorError` message a node records when its campaign returns
/// `Stopped`: the moment a scheduled stop was honoured.
pub const STOPPED: &str = "stopped";

/// A request to the fake S3, from invocation to its outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreOp {
    /// The node process that sent it, as `node#incarnation`, if known.
    pub client: Option<String>,
    /// What the request was.
    pub op: StoreOpKind,
    /// The condition's ETag, for updates and deletes.
    pub expected: Option<String>,
    /// The ETag written, for writes that applied.
    pub written: Option<String>,
    /// For reads: the ETag returned, `None` for a missing key.
    pub read: Option<String>,
    /// HTTP status sent; `None` when the reply was dropped.
    pub status: Option<u16>,
    /// Whether the operation changed the object.
    pub applied: bool,
    /// The generation in the record written, for writes that applied.
    pub generation: Option<u64>,
    /// Whether the record written is a `released` one.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    /// When the request arrived, in microseconds.
    pub invoked_us: u64,
    /// When it was answered or its reply dropped, in microseconds.
    pub ended_us: u64,
    /// Whether the reply was dropped, so the client cannot know the outcome.
    pub reply_dropped: bool,
}

/// Why a node's leader context (or a key's work) ended, as the node saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepReason {
    /// The context was cancelled: the term ended or was lost.
    Cancelled,
    /// The work returned and the term was released.
    Released,
    /// The work's future was dropped before it returned.
    Dropped,
}

/// How the elector's event stream said a term ended (`Event::Lost`): the
/// loss reason's kind, or `released` for a confirmed release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossKind {
    /// A confirmed release.
    Released,
    /// The term ran out before a renewal landed.
    Expired,
    /// Someone else's write replaced the record.
    Superseded,
    /// The key was deleted.
    Deleted,
    /// A renewal was refused for good.
    Failed,
    /// A release whose outcome the elector could not confirm.
    ReleaseUnconfirmed,
    /// The term's future was dropped.
    Abandoned,
    /// A reason this simulator does not know yet.
    Other,
}

impl LossKind {
    /// The kind of an elector's loss reason; `None` is a confirmed release.
    pub fn of(reason: Option<&hoplock::elector::LossReason>) -> LossKind {
        use hoplock::elector::LossReason;
        match reason {
            None => LossKind::Released,
            Some(LossReason::Expired) => LossKind::Expired,
            Some(LossReason::Superseded) => LossKind::Superseded,
            Some(LossReason::Deleted) => LossKind::Deleted,
            Some(LossReason::Failed(_)) => LossKind::Failed,
            Some(LossReason::ReleaseUnconfirmed(_)) => LossKind::ReleaseUnconfirmed,
            Some(LossReason::Abandoned) => LossKind::Abandoned,
            Some(_) => LossKind::Other,
        }
    }
}

impl LossKind {
    /// The name the history writes.
    pub fn name(self) -> &'static str {
        match self {
            LossKind::Released => "released",
            LossKind::Expired => "expired",
            LossKind::Superseded => "superseded",
            LossKind::Deleted => "deleted",
            LossKind::Failed => "failed",
            LossKind::ReleaseUnconfirmed => "release-unconfirmed",
            LossKind::Abandoned => "abandoned",
            LossKind::Other => "other",
        }
    }
}

impl Serialize for LossKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl std::fmt::Display for LossKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a store request was, as the checkers tell requests apart: a read,
/// or a write by its condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreOpKind {
    /// A GET or HEAD.
    #[default]
    Read,
    /// A PUT with `If-None-Match: *`.
    Create,
    /// A PUT with `If-Match`.
    Update,
    /// A PUT with no condition.
    Put,
    /// A DELETE, with or without `If-Match`.
    Delete,
}

impl StoreOp {
    /// The node that sent it, if known: the node part of its client name.
    pub fn node(&self) -> Option<&str> {
        self.client.as_deref().map(node_of)
    }
}

/// The node part of a `node#incarnation` client name.
pub fn node_of(client: &str) -> &str {
    client.split_once('#').map_or(client, |(node, _)| node)
}

/// A shared, append-only history for one run.
#[derive(Clone, Debug, Default)]
pub struct History {
    entries: Rc<RefCell<Vec<Entry>>>,
}

impl History {
    /// Appends an entry at simulated time `at`.
    pub fn record(&self, at: Duration, node: &str, event: Event) {
        self.entries.borrow_mut().push(Entry { at_us: at.as_micros() as u64, node: node.to_string(), event });
    }

    /// Appends an entry at the current host's simulated time.
    pub fn record_now(&self, node: &str, event: Event) {
        self.record(turmoil::sim_elapsed().unwrap_or_default(), node, event);
    }

    /// How many entries there are so far.
    pub fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    /// The earliest instant (microseconds) of the entries from `index` on.
    pub fn earliest_since(&self, index: usize) -> Option<u64> {
        self.entries.borrow().get(index..)?.iter().map(|entry| entry.at_us).min()
    }

    /// Whether nothing has been recorded yet.
    pub fn is_empty(&self) -> bool {
        self.entries.borrow().is_empty()
    }

    /// A copy of every entry so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries.borrow().clone()
    }
}

/// The history as JSON lines, one entry a line.
pub fn to_json_lines(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        out.push_str(&serde_json::to_string(entry).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// A hash of the JSON lines: equal histories give equal hashes, and a
/// replay that diverges anywhere gives another.
///
/// Each line is written into one buffer and hashed from there, eight bytes
/// at a time, rather than the whole history joined into one string first:
/// the bytes hashed are those of [`to_json_lines`].
pub fn trace_hash(entries: &[Entry]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut line = Vec::with_capacity(512);
    for entry in entries {
        line.clear();
        // An entry that does not serialize is an empty line there too.
        if serde_json::to_writer(&mut line, entry).is_err() {
            line.clear();
        }
        line.push(b'\n');
        let mut words = line.chunks_exact(8);
        for word in &mut words {
            hash = mix(hash, u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        // The line's last bytes, with its length, so that lines that differ
        // only by trailing zeros hash apart.
        let mut tail = [0_u8; 8];
        tail[..words.remainder().len()].copy_from_slice(words.remainder());
        hash = mix(hash, u64::from_le_bytes(tail) ^ (line.len() as u64).rotate_left(56));
    }
    hash
}

/// One word into the hash: a multiply and a shift, so that every bit of
/// the word reaches every bit of the hash within a few words.
fn mix(hash: u64, word: u64) -> u64 {
    let mixed = (hash ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    mixed ^ (mixed >> 29)
}
