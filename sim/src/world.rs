//! What a simulated run consists of: the nodes and their settings, the fake
//! S3's behaviour, the fault schedule and how long to run.
//!
//! These types are plain data with serde derives, so scenario files can be
//! read straight into them and generated scenarios written back out.

use serde::{Deserialize, Serialize};

use crate::clocks::ClockSpec;
use crate::fake_s3::{Faults, ProviderMode};

/// A whole simulated world.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct World {
    /// The electing nodes.
    pub nodes: Vec<NodeSpec>,
    /// The fake S3.
    #[serde(default)]
    pub s3: S3Spec,
    /// Faults at set times.
    #[serde(default)]
    pub schedule: Vec<Scheduled>,
    /// How long to run, in simulated milliseconds.
    pub duration_ms: u64,
    /// turmoil's tick. 10 ms keeps runs fast; drift scenarios need
    /// ρ·TTL of at least ten ticks for drift bugs to show.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// The simulated network between all hosts.
    #[serde(default)]
    pub network: NetworkSpec,
    /// When set, the nodes are keyed writers sharing keys out over one
    /// membership object instead of electors of one lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyed: Option<KeyedSpec>,
}

/// A keyed world: every node runs a `hoplock::keyed::KeyedWriter` over the
/// same keys, with the member timing of its `[nodes.elector]` settings
/// (TTL, renew interval, request timeout, stop margin, drift bound,
/// lock-delay).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyedSpec {
    /// How many keys the members share (`k0`, `k1`, ...).
    pub keys: u32,
    /// How often members read the membership object; default the renew
    /// interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_interval_ms: Option<u64>,
    /// Whether a key new to a member waits for every member to adopt the
    /// join that moved it. `false` runs HRW over each member's own list, as
    /// membership that fails open does; such a world must show two writers.
    #[serde(default = "yes")]
    pub adoption: bool,
    /// How long a key's work takes to stop once its context is cancelled
    /// (W in the leave bound), in milliseconds.
    #[serde(default = "default_work_stop_ms")]
    pub work_stop_ms: u64,
    /// Whether a key's work never looks at its context: it writes on until
    /// its member aborts it (at the end of the member's term), as careless
    /// user code does.
    #[serde(default)]
    pub work_ignores_cancellation: bool,
    /// How many keys (`k0` up) write to a fenced downstream while they are
    /// acted on: a sample, so that large worlds stay quick.
    #[serde(default = "default_fenced_keys")]
    pub fenced_keys: u32,
    /// How often the work on a fenced key writes, in milliseconds.
    #[serde(default = "default_fenced_every_ms")]
    pub fenced_every_ms: u64,
    /// The longest a fenced write is in flight, in milliseconds: each
    /// write's delay is drawn from the seed up to this, so a holder's last
    /// writes can arrive after the next holder's first.
    #[serde(default = "default_fenced_latency_ms")]
    pub fenced_latency_ms: u64,
    /// The view every member creates a missing membership object at, when
    /// its node says nothing else (`0`: no member creates one, and the
    /// object must come from elsewhere). A member that has seen a view
    /// never creates one, whatever this says.
    #[serde(default = "default_create_at_view")]
    pub create_at_view: u64,
    /// How the members decide who acts for a key: one membership object
    /// (the design), or one election lease per key (the baseline it is
    /// measured against).
    #[serde(default)]
    pub protocol: KeyedProtocol,
}

/// How a keyed world shares its keys out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyedProtocol {
    /// `hoplock::keyed::KeyedWriter` over one membership object.
    #[default]
    Membership,
    /// One `hoplock::Elector` per key and member, on key `leases/k{i}`:
    /// whoever wins a key's lease acts for it, with its generation as the
    /// round. What one lease per key costs; keys do not follow HRW.
    LeasePerKey,
}

fn default_create_at_view() -> u64 {
    1
}

fn default_fenced_keys() -> u32 {
    100
}

fn default_fenced_every_ms() -> u64 {
    1_000
}

fn default_fenced_latency_ms() -> u64 {
    1_000
}

fn default_work_stop_ms() -> u64 {
    200
}

fn yes() -> bool {
    true
}

/// Latency and loss on every link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Smallest one-way message latency.
    #[serde(default = "default_latency_min_ms")]
    pub latency_min_ms: u64,
    /// Largest one-way message latency.
    #[serde(default = "default_latency_max_ms")]
    pub latency_max_ms: u64,
    /// Chance that a link starts dropping messages, per message.
    #[serde(default)]
    pub loss_rate: f64,
    /// Chance that a dropping link recovers, per message.
    #[serde(default = "default_repair_rate")]
    pub loss_repair_rate: f64,
}

fn default_latency_min_ms() -> u64 {
    1
}

fn default_latency_max_ms() -> u64 {
    20
}

fn default_repair_rate() -> f64 {
    1.0
}

impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            latency_min_ms: default_latency_min_ms(),
            latency_max_ms: default_latency_max_ms(),
            loss_rate: 0.0,
            loss_repair_rate: default_repair_rate(),
        }
    }
}

pub(crate) fn default_tick_ms() -> u64 {
    10
}

/// One node: its name, clock, elector settings and leader-only workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Host name; also the owner name in the lease unless `owner` is set.
    pub name: String,
    /// The owner name the elector writes, when it differs from the host
    /// name: two hosts with one owner name are one service's old and new
    /// process, running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// In keyed worlds, the view this member creates a missing membership
    /// object at (`0`: it never creates one); default the world's
    /// `[keyed] create_at_view`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_at_view: Option<u64>,
    /// The node's clock.
    #[serde(default)]
    pub clock: ClockSpec,
    /// The elector's settings.
    #[serde(default)]
    pub elector: ElectorSpec,
    /// What the node does while it leads.
    #[serde(default)]
    pub workload: WorkloadSpec,
}

/// Which decision rules the elector follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicySpec {
    /// The library's safe policy.
    #[default]
    Ours,
    /// The Go hoplock's rules, kept to show where they break.
    Seed,
}

/// When followers read the lease key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadsSpec {
    /// About once per renew interval, just after the holder's renewals
    /// (the library's default).
    #[default]
    FollowRenewals,
    /// Every poll interval, as the Go hoplock does.
    Poll,
}

/// Elector settings; unset durations take the library's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElectorSpec {
    /// Lease TTL.
    #[serde(default = "default_ttl_ms")]
    pub ttl_ms: u64,
    /// Renew interval; default TTL/3.
    #[serde(default)]
    pub renew_ms: Option<u64>,
    /// Poll interval; default TTL/15.
    #[serde(default)]
    pub poll_ms: Option<u64>,
    /// Per-request timeout; default TTL/6.
    #[serde(default)]
    pub request_timeout_ms: Option<u64>,
    /// Drift bound ρ.
    #[serde(default = "default_drift_bound")]
    pub drift_bound: f64,
    /// Lock-delay after an involuntary takeover.
    #[serde(default)]
    pub lock_delay_ms: u64,
    /// How long before the lease can pass the holder stops; default TTL/10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_margin_ms: Option<u64>,
    /// How long a release, or settling a takeover that a stop overtook,
    /// may take; default 2000 (the elector's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_timeout_ms: Option<u64>,
    /// Decision policy.
    #[serde(default)]
    pub policy: PolicySpec,
    /// When followers read. The `seed` policy's records advertise no renew
    /// interval, so its followers poll either way.
    #[serde(default, skip_serializing_if = "is_default")]
    pub reads: ReadsSpec,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

fn default_ttl_ms() -> u64 {
    6_000
}

fn default_drift_bound() -> f64 {
    1e-3
}

impl Default for ElectorSpec {
    fn default() -> Self {
        ElectorSpec {
            ttl_ms: default_ttl_ms(),
            renew_ms: None,
            poll_ms: None,
            request_timeout_ms: None,
            drift_bound: default_drift_bound(),
            lock_delay_ms: 0,
            stop_margin_ms: None,
            release_timeout_ms: None,
            policy: PolicySpec::Ours,
            reads: ReadsSpec::FollowRenewals,
        }
    }
}

/// The leader-only work: a write to the fenced downstream resource every
/// `write_every_ms`, carrying the term's generation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// How often the leader writes downstream.
    #[serde(default = "default_write_every_ms")]
    pub write_every_ms: u64,
    /// How long a downstream write is in flight: the leader decides to
    /// write, then the write lands this much later without looking at its
    /// context again, as a real request on the wire does. A pause in that
    /// gap makes the write land stale.
    #[serde(default = "default_write_latency_ms")]
    pub write_latency_ms: u64,
    /// After its context is cancelled, keep writing this long (a callback
    /// that ignores cancellation). Zero: stop at once.
    #[serde(default)]
    pub ignore_cancellation_ms: u64,
    /// Give up leadership (return from the work) after this long; `None`
    /// holds until the context is cancelled. With `api = "run"` returning
    /// only drops the work guard, which does not resign.
    #[serde(default)]
    pub release_after_ms: Option<u64>,
    /// Which of the elector's interfaces drives the work.
    #[serde(default)]
    pub api: Api,
    /// With `api = "drop-lead"`: how long into each term the caller drops
    /// the `lead` future.
    #[serde(default = "default_drop_after_ms")]
    pub drop_after_ms: u64,
    /// Also call `Elector::observe` this often, recording what it reports.
    #[serde(default)]
    pub observe_every_ms: Option<u64>,
    /// With `api = "lead"` or `"drop-lead"`: after each term, wait this long
    /// before campaigning again, as a process that leaves leadership to
    /// others for a while. The next leader then has to take over from the
    /// record this term left behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rest_after_term_ms: Option<u64>,
}

/// Which of the elector's interfaces a node's work uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// `Elector::lead`, over and over.
    #[default]
    Lead,
    /// `Elector::run`: the work starts from `Event::Acquired` and holds its
    /// `WorkGuard` until it has stopped.
    Run,
    /// `Elector::lead`, with the future dropped `drop_after_ms` into each
    /// term, as a caller that gives up on it (a `select!` elsewhere, a
    /// timeout).
    DropLead,
}

fn default_drop_after_ms() -> u64 {
    3_000
}

fn default_write_every_ms() -> u64 {
    500
}

fn default_write_latency_ms() -> u64 {
    20
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            write_every_ms: default_write_every_ms(),
            write_latency_ms: default_write_latency_ms(),
            ignore_cancellation_ms: 0,
            release_after_ms: None,
            api: Api::Lead,
            drop_after_ms: default_drop_after_ms(),
            observe_every_ms: None,
            rest_after_term_ms: None,
        }
    }
}

/// The fake S3's behaviour.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Spec {
    /// Provider mode by its shared name (`honest`, `ignore-if-match`, ...).
    #[serde(default)]
    pub mode: ProviderMode,
    /// Injected faults.
    #[serde(default)]
    pub faults: Faults,
}

/// A fault at a set time.
///
/// Unknown fields are refused by [`Action`], which receives every field but
/// `at_ms` (serde cannot refuse them here as well because of the flatten).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scheduled {
    /// When, in simulated milliseconds.
    pub at_ms: u64,
    /// What.
    #[serde(flatten)]
    pub action: Action,
}

/// Fault actions, named after turmoil's verbs where it has them.
///
/// Wherever an action names a node, [`LEADER`] (`"@leader"`) names the node
/// leading when the action fires (the one with the highest generation); the
/// action is skipped, and the history says so, if nobody leads then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Action {
    /// Cut both directions between two hosts (`s3` is the store).
    Partition { a: String, b: String },
    /// Cut one direction only.
    PartitionOneway { from: String, to: String },
    /// Restore both directions.
    Repair { a: String, b: String },
    /// Hold messages between two hosts (delivered on release).
    Hold { a: String, b: String },
    /// Deliver held messages.
    Release { a: String, b: String },
    /// Stop a node's software at once; nothing is released.
    Crash { node: String },
    /// Start a crashed node again: a new process, a new incarnation.
    Restart { node: String },
    /// Stop the world for one node: no timers fire and no messages flow for
    /// `for_ms`, then it resumes where it was.
    Pause { node: String, for_ms: u64 },
    /// Suspend the node's host for `for_ms` (a laptop asleep, a VM paused
    /// and restored): paused like `pause`, and its clock that stops in
    /// suspend stands still meanwhile, so its timers fire late by `for_ms`
    /// (see the clocks module).
    Suspend { node: String, for_ms: u64 },
    /// Shut a node down gracefully: its elector is stopped, its leader-only
    /// work is cancelled and the lease released once the work returns. The
    /// node campaigns again only after a `restart`.
    Stop { node: String },
    /// Drop a keyed member's run future while its process lives on, as an
    /// application does that selects on a shutdown signal or aborts the
    /// task the member runs in. Nothing is released and nobody is told:
    /// every key's work must end at once, not when the term runs out. The
    /// node runs again only after a `restart`.
    Abandon { node: String },
    /// Step the node's wall clock by `by_ms` (an NTP jump; negative steps
    /// back). Its monotonic clock is unaffected.
    StepClock { node: String, by_ms: i64 },
    /// Someone other than the electors writes the lease key,
    /// unconditionally: another tool, an operator, the Go library.
    WriteRecord { record: ForeignRecord },
    /// Someone deletes the lease key (a lifecycle rule, an operator).
    DeleteKey,
    /// What `hoplock lease reset --generation-floor` does: a released record
    /// at the floor or the stored generation, whichever is higher.
    ResetKey { generation_floor: u64 },
    /// Someone deletes the keyed world's membership object under its live
    /// members (a lifecycle rule, an operator cleaning up).
    DeleteMembers,
    /// Someone other than the members writes the membership object,
    /// unconditionally: `raw` bytes (a corrupt object); with `views_back`,
    /// the object as it stands with its view that many lower (a stale copy
    /// restored over it); with `drop_member`, the object as it stands
    /// without that member's entry and with its view unchanged (a hand edit
    /// that forgot to raise the view); or, with `reincarnate_member`, the
    /// object as it stands with that member's entry under another
    /// incarnation, its view unchanged (an entry copied in from another
    /// copy of the group).
    WriteMembers {
        #[serde(default)]
        raw: Option<String>,
        #[serde(default)]
        views_back: Option<u64>,
        #[serde(default)]
        drop_member: Option<String>,
        #[serde(default)]
        reincarnate_member: Option<String>,
    },
    /// What `hoplock members reset --view-floor --wait --force` does: a new
    /// membership object at the floor (or above the stored view), held
    /// inactive by a placeholder entry until members evict it after
    /// `wait_ms`.
    ResetMembers { view_floor: u64, wait_ms: u64 },
    /// The store refuses every request for `for_ms`, applying nothing: an
    /// outage, or throttling of the whole prefix. `status` is the answer:
    /// 503 (SlowDown, the default), 429 or 500.
    Outage {
        for_ms: u64,
        #[serde(default = "default_outage_status")]
        status: u16,
    },
}

/// A record written by someone else. With `raw`, those bytes are stored
/// instead (a corrupt record). Without `ttl_ms` and `incarnation`, it is
/// what the Go library writes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForeignRecord {
    /// Its generation (`18446744073709551615` is an exhausted one).
    #[serde(default)]
    pub generation: u64,
    /// Its TTL; absent, as in the Go library's records.
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// Whether it is a released record.
    #[serde(default)]
    pub released: bool,
    /// Bytes to store instead of a record.
    #[serde(default)]
    pub raw: Option<String>,
}

impl ForeignRecord {
    /// The bytes stored.
    pub fn bytes(&self) -> Vec<u8> {
        if let Some(raw) = &self.raw {
            return raw.as_bytes().to_vec();
        }
        let mut record = serde_json::json!({
            "generation": self.generation,
            "expires_at": "2030-01-01T00:00:00Z",
            "owner": "someone else",
        });
        if let Some(ttl_ms) = self.ttl_ms {
            record["ttl_ms"] = ttl_ms.into();
            record["nonce"] = format!("foreign-{}", self.generation).into();
            record["incarnation"] = "foreign".into();
        }
        if self.released {
            record["released"] = true.into();
        }
        serde_json::to_vec(&record).unwrap_or_default()
    }

    /// Whether an elector can never use it: corrupt bytes, a TTL beyond
    /// what any elector accepts, or a generation with no successor. It stays
    /// so until the key is reset or deleted.
    pub fn unusable(&self) -> bool {
        hoplock::lease::LeaseRecord::decode(&self.bytes()).map_or(true, |record| record.generation.next().is_none())
    }
}

fn default_outage_status() -> u16 {
    503
}

/// The node name that stands for the current leader in a scheduled action.
pub const LEADER: &str = "@leader";

/// How the history's label of a `write-members` fault ends when it rewrote
/// the object at the view number the members know (`drop_member`,
/// `reincarnate_member`): `keyed_rewrites` finds those rewrites by it.
pub const SAME_VIEW_REWRITE: &str = "at the same view";

impl Action {
    /// The hosts the action names, in order.
    pub fn hosts(&self) -> Vec<&str> {
        match self {
            Action::Partition { a, b } | Action::Repair { a, b } | Action::Hold { a, b } | Action::Release { a, b } => {
                vec![a, b]
            }
            Action::PartitionOneway { from, to } => vec![from, to],
            Action::Crash { node }
            | Action::Restart { node }
            | Action::Pause { node, .. }
            | Action::Suspend { node, .. }
            | Action::Stop { node }
            | Action::Abandon { node }
            | Action::StepClock { node, .. } => vec![node],
            Action::WriteRecord { .. }
            | Action::DeleteKey
            | Action::ResetKey { .. }
            | Action::DeleteMembers
            | Action::WriteMembers { .. }
            | Action::ResetMembers { .. }
            | Action::Outage { .. } => Vec::new(),
        }
    }

    /// The action with every [`LEADER`] replaced by `leader`.
    pub fn resolve(&self, leader: &str) -> Action {
        let pick = |name: &String| if name == LEADER { leader.to_string() } else { name.clone() };
        match self {
            Action::Partition { a, b } => Action::Partition { a: pick(a), b: pick(b) },
            Action::PartitionOneway { from, to } => Action::PartitionOneway { from: pick(from), to: pick(to) },
            Action::Repair { a, b } => Action::Repair { a: pick(a), b: pick(b) },
            Action::Hold { a, b } => Action::Hold { a: pick(a), b: pick(b) },
            Action::Release { a, b } => Action::Release { a: pick(a), b: pick(b) },
            Action::Crash { node } => Action::Crash { node: pick(node) },
            Action::Restart { node } => Action::Restart { node: pick(node) },
            Action::Pause { node, for_ms } => Action::Pause { node: pick(node), for_ms: *for_ms },
            Action::Suspend { node, for_ms } => Action::Suspend { node: pick(node), for_ms: *for_ms },
            Action::Stop { node } => Action::Stop { node: pick(node) },
            Action::Abandon { node } => Action::Abandon { node: pick(node) },
            Action::StepClock { node, by_ms } => Action::StepClock { node: pick(node), by_ms: *by_ms },
            Action::WriteRecord { .. }
            | Action::DeleteKey
            | Action::ResetKey { .. }
            | Action::DeleteMembers
            | Action::WriteMembers { .. }
            | Action::ResetMembers { .. }
            | Action::Outage { .. } => self.clone(),
        }
    }

    /// How the history names the action: its verb and hosts.
    pub fn label(&self) -> String {
        let verb = match self {
            Action::Partition { .. } => "partition",
            Action::PartitionOneway { .. } => "partition-oneway",
            Action::Repair { .. } => "repair",
            Action::Hold { .. } => "hold",
            Action::Release { .. } => "release",
            Action::Crash { .. } => "crash",
            Action::Restart { .. } => "restart",
            Action::Pause { .. } => "pause",
            Action::Suspend { .. } => "suspend",
            Action::Stop { .. } => "stop",
            Action::Abandon { .. } => "abandon",
            Action::StepClock { .. } => "step-clock",
            Action::WriteRecord { .. } => "write-record",
            Action::DeleteKey => "delete-key",
            Action::ResetKey { .. } => "reset-key",
            Action::DeleteMembers => "delete-members",
            Action::WriteMembers { .. } => "write-members",
            Action::ResetMembers { .. } => "reset-members",
            Action::Outage { .. } => "outage",
        };
        let mut label = verb.to_string();
        for host in self.hosts() {
            label.push(' ');
            label.push_str(host);
        }
        match self {
            Action::Pause { for_ms, .. } | Action::Suspend { for_ms, .. } => {
                label.push_str(&format!(" for {for_ms} ms"))
            }
            Action::StepClock { by_ms, .. } => label.push_str(&format!(" by {by_ms} ms")),
            Action::WriteRecord { record } => match &record.raw {
                Some(_) => label.push_str(" (corrupt bytes)"),
                None => label.push_str(&format!(
                    " generation {} ttl {}{}",
                    record.generation,
                    record.ttl_ms.map_or_else(|| "none".to_string(), |ms| format!("{ms} ms")),
                    if record.released { " released" } else { "" }
                )),
            },
            Action::ResetKey { generation_floor } => label.push_str(&format!(" floor {generation_floor}")),
            Action::WriteMembers { raw: Some(_), .. } => label.push_str(" (corrupt bytes)"),
            Action::WriteMembers { views_back: Some(back), .. } => label.push_str(&format!(" {back} views back")),
            Action::WriteMembers { drop_member: Some(member), .. } => {
                label.push_str(&format!(" without {member} {SAME_VIEW_REWRITE}"))
            }
            Action::WriteMembers { reincarnate_member: Some(member), .. } => {
                label.push_str(&format!(" with {member} reincarnated {SAME_VIEW_REWRITE}"))
            }
            Action::ResetMembers { view_floor, wait_ms } => {
                label.push_str(&format!(" floor {view_floor} wait {wait_ms} ms"))
            }
            Action::Outage { for_ms, status } => label.push_str(&format!(" for {for_ms} ms answering {status}")),
            _ => {}
        }
        label
    }

    /// The verb alone, for counting faults by kind.
    pub fn verb(&self) -> String {
        self.label().split(' ').next().unwrap_or_default().to_string()
    }
}

impl World {
    /// The node names, in order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_placeholder_is_resolved_and_labels_name_verb_and_hosts() {
        let pause = Action::Pause { node: LEADER.into(), for_ms: 500 };
        assert_eq!(pause.hosts(), vec![LEADER]);
        let resolved = pause.resolve("b");
        assert_eq!(resolved, Action::Pause { node: "b".into(), for_ms: 500 });
        assert_eq!(resolved.label(), "pause b for 500 ms");
        assert_eq!(resolved.verb(), "pause");
        let cut = Action::PartitionOneway { from: "s3".into(), to: LEADER.into() }.resolve("a");
        assert_eq!(cut.label(), "partition-oneway s3 a");
        assert_eq!(Action::StepClock { node: "c".into(), by_ms: -60_000 }.label(), "step-clock c by -60000 ms");
    }
}
