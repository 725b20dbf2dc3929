//! The properties every run is checked against, one module each.
//!
//! Each checker reads the [`History`](crate::history::Entry) of one run and
//! reports every [`Violation`] it finds. Each violation names its property,
//! the nodes, the generation and the simulated time; the runner adds the
//! seed that reproduces it.

use std::fmt;

use serde::Serialize;

use crate::history::{Entry, Event};

pub mod action_skipped;
pub mod belief_overlap;
pub mod campaign_ended;
pub mod events_truthful;
pub mod foreign_wait;
pub mod keyed_acting;
pub mod keyed_fencing;
pub mod keyed_handle_truthful;
pub mod keyed_lock_delay;
pub mod keyed_moves;
pub mod keyed_one_writer;
pub mod keyed_rounds;
pub mod keyed_settled;
pub mod keyed_term;
pub mod linearizable;
pub mod liveness;
pub mod lock_delay;
pub mod monotone_fencing;
pub mod nobody_led;
pub mod observe_truthful;
pub mod one_holder_per_generation;
pub mod release_after_work;
pub mod stop_honoured;

/// The properties, as the safety rules in ARCHITECTURE.md number them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Property {
    /// I1: at most one node ever acquires a given generation.
    OneHolderPerGeneration,
    /// I2: accepted fencing tokens and the stored generation never go down.
    MonotoneFencing,
    /// I3/I4: no two nodes believe they lead at the same instant.
    NoBeliefOverlap,
    /// I5: after an involuntary takeover the new leader waits out its
    /// lock-delay before acting.
    LockDelay,
    /// I6: the lease is released only after the leader-only work stopped.
    ReleaseAfterWork,
    /// L1: someone leads soon after the faults stop or after a release.
    Liveness,
    /// The store's history is linearizable as a compare-and-swap register.
    Linearizable,
    /// No vacuous pass: somebody led at some point in the run.
    NobodyLed,
    /// No vacuous pass: no elector's campaign ended with an error.
    CampaignEnded,
    /// No vacuous pass: every scheduled action was applied.
    ActionSkipped,
    /// L3: what `Elector::observe` reports is true of the store.
    ObserveTruthful,
    /// L4: a stopped elector starts no term.
    StopHonoured,
    /// L5: the elector's events announce and end each term once, and the
    /// loss reasons they give are true of the run.
    EventsTruthful,
    /// K1: per key, at most one member incarnation acts at any instant.
    KeyedOneWriter,
    /// K2: no (key, round) is started by two incarnations, and per key
    /// rounds only rise from one holder to the next.
    KeyedRounds,
    /// K3: after churn stops, every key has exactly one acting owner, the
    /// HRW owner over the live members, within the keyed crash bound.
    KeyedSettled,
    /// K4: no key is acted on after its member's term ended.
    KeyedTerm,
    /// K5: a view change moves exactly the keys HRW predicts, and a key is
    /// started only by its owner in its round's view.
    KeyedMoves,
    /// K6: per key, the rounds the fenced downstream accepts never go down,
    /// and it never turns away the newest holder's writes.
    KeyedFencing,
    /// I4 for foreign records: a record someone else wrote is waited out
    /// for its TTL (the assumed one if it states none), a deleted key for
    /// the last TTL, and an exhausted generation is never written over.
    ForeignWait,
    /// K7: a key its holder lost involuntarily (an eviction, an object
    /// deleted under it) starts elsewhere only after the lock-delay.
    KeyedLockDelay,
    /// K8: what a keyed member's handle reports (leases, members, view) is
    /// true of what the member does and of what the store committed.
    KeyedHandleTruthful,
}

impl Property {
    /// The short name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            Property::OneHolderPerGeneration => "one-holder-per-generation",
            Property::MonotoneFencing => "monotone-fencing",
            Property::NoBeliefOverlap => "no-belief-overlap",
            Property::LockDelay => "lock-delay",
            Property::ReleaseAfterWork => "release-after-work",
            Property::Liveness => "liveness",
            Property::Linearizable => "linearizable",
            Property::NobodyLed => "nobody-led",
            Property::CampaignEnded => "campaign-ended",
            Property::ActionSkipped => "action-skipped",
            Property::ObserveTruthful => "observe-truthful",
            Property::StopHonoured => "stop-honoured",
            Property::EventsTruthful => "events-truthful",
            Property::KeyedOneWriter => "keyed-one-writer",
            Property::KeyedRounds => "keyed-rounds",
            Property::KeyedSettled => "keyed-settled",
            Property::KeyedTerm => "keyed-term",
            Property::KeyedMoves => "keyed-moves",
            Property::KeyedFencing => "keyed-fencing",
            Property::KeyedLockDelay => "keyed-lock-delay",
            Property::KeyedHandleTruthful => "keyed-handle-truthful",
            Property::ForeignWait => "foreign-wait",
        }
    }

    /// Whether breaking it means two writers or a token going down, as
    /// opposed to a run that led too little or tested too little.
    pub fn is_safety(self) -> bool {
        !matches!(
            self,
            Property::Liveness
                | Property::NobodyLed
                | Property::CampaignEnded
                | Property::ActionSkipped
                | Property::ObserveTruthful
                | Property::StopHonoured
                | Property::EventsTruthful
                | Property::KeyedSettled
                | Property::KeyedHandleTruthful
        )
    }

    /// What breaking it looks like, in words.
    pub fn summary(self) -> &'static str {
        match self {
            Property::OneHolderPerGeneration => "two leaders in one generation",
            Property::MonotoneFencing => "a fencing token went down",
            Property::NoBeliefOverlap => "two nodes believed they led at once",
            Property::LockDelay => "a new leader acted before its lock-delay passed",
            Property::ReleaseAfterWork => "the lease was released while the work still wrote",
            Property::Liveness => "nobody led when someone should have",
            Property::Linearizable => "the store's history is not linearizable",
            Property::NobodyLed => "nobody led in the whole run",
            Property::CampaignEnded => "an elector's campaign ended with an error",
            Property::ActionSkipped => "a scheduled action was skipped",
            Property::ObserveTruthful => "a follower's observe() reported something the store never held",
            Property::StopHonoured => "a stopped elector started a term",
            Property::EventsTruthful => "an elector's events misreported a term",
            Property::KeyedOneWriter => "two members acted for one key at once",
            Property::KeyedRounds => "a key's round was reused or went down",
            Property::KeyedSettled => "keys did not settle on their HRW owners in time",
            Property::KeyedTerm => "a member acted for a key after its term ended",
            Property::KeyedMoves => "keys moved that HRW did not move, or started off their owner",
            Property::KeyedFencing => "a key's fenced downstream accepted a lower round or shut out its newest holder",
            Property::KeyedLockDelay => "a key its holder lost involuntarily started elsewhere before the lock-delay",
            Property::KeyedHandleTruthful => "a member's handle reported a lease, members or a view that were not so",
            Property::ForeignWait => {
                "a foreign or deleted record was taken over before its wait, or an exhausted one written over"
            }
        }
    }

    /// Every property, in report order.
    pub const ALL: [Property; 22] = [
        Property::OneHolderPerGeneration,
        Property::MonotoneFencing,
        Property::NoBeliefOverlap,
        Property::LockDelay,
        Property::ReleaseAfterWork,
        Property::Liveness,
        Property::Linearizable,
        Property::NobodyLed,
        Property::CampaignEnded,
        Property::ActionSkipped,
        Property::ObserveTruthful,
        Property::StopHonoured,
        Property::EventsTruthful,
        Property::KeyedOneWriter,
        Property::KeyedRounds,
        Property::KeyedSettled,
        Property::KeyedTerm,
        Property::KeyedMoves,
        Property::KeyedFencing,
        Property::KeyedLockDelay,
        Property::KeyedHandleTruthful,
        Property::ForeignWait,
    ];
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A broken property.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which property.
    pub property: Property,
    /// When it was first broken, in simulated microseconds.
    pub at_us: u64,
    /// The nodes involved.
    pub nodes: Vec<String>,
    /// The generation involved, if one is.
    pub generation: Option<u64>,
    /// What happened.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] at {:.3}s", self.property, self.at_us as f64 / 1e6)?;
        if !self.nodes.is_empty() {
            write!(f, " on {}", self.nodes.join(", "))?;
        }
        if let Some(generation) = self.generation {
            write!(f, " (generation {generation})")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// What the checkers need to know about the run besides its history.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// Node names.
    pub nodes: Vec<String>,
    /// The longest gap between a follower's reads (a poll, or the longest
    /// advertised renew interval for followers of renewals) plus a round
    /// trip and a request timeout (and the attempts the store's failure rate
    /// calls for), in µs: the release handover bound.
    pub handover_bound_us: u64,
    /// Who could contend from when: (µs, node names), from the start, one
    /// entry per change as the runner applied the schedule. A node contends
    /// while it runs and reaches the store both ways.
    pub contention: Vec<(u64, Vec<String>)>,
    /// k: read-and-write attempts a contender may need before one pair gets
    /// through, given the store's failure rates (see [`liveness::attempts`]).
    pub attempts: u32,
    /// The longest TTL a record written by someone else makes contenders
    /// wait (a record without one is waited out for the assumed TTL), µs.
    pub foreign_ttl_us: u64,
    /// How long after its sender stopped a write may still commit, in µs:
    /// the store's longest latency and a one-way trip. Contenders wait out
    /// the TTL from when they see the last holder's final renewal.
    pub in_flight_us: u64,
    /// When the run ended, in µs.
    pub end_us: u64,
    /// Per-node settings the checkers need.
    pub facts: Vec<NodeFacts>,
    /// turmoil's tick, in µs: the resolution of every simulated timer.
    pub tick_us: u64,
    /// Whether reads return the current version (every provider mode but
    /// `stale-reads`).
    pub reads_current: bool,
    /// Set in keyed worlds.
    pub keyed: Option<KeyedFacts>,
}

/// What the keyed checkers need to know.
#[derive(Clone, Debug, Default)]
pub struct KeyedFacts {
    /// How many keys (`k0`...).
    pub keys: u32,
    /// Member ids of nodes whose id is not their name: (node, id).
    pub ids: Vec<(String, String)>,
    /// How long after the last membership change every key must have
    /// settled on its HRW owner, in µs.
    pub settle_bound_us: u64,
    /// Whether the world runs one lease per key (the baseline): its keys
    /// follow no HRW view, and its terms are per key, so only the checkers
    /// that hold for any single-writer scheme judge it.
    pub leases_per_key: bool,
}

impl KeyedFacts {
    /// The member id node `node` runs under.
    pub fn id_of<'a>(&'a self, node: &'a str) -> &'a str {
        self.ids.iter().find(|(n, _)| n == node).map_or(node, |(_, id)| id.as_str())
    }
}

impl Context {
    /// The settings of the node named `name`.
    pub fn node(&self, name: &str) -> Option<&NodeFacts> {
        self.facts.iter().find(|facts| facts.name == name)
    }

    /// The longest a window with these contenders may go without a leader.
    /// A contender waits out the *holder's* TTL, and the last holder may be
    /// any node, so: the longest TTL of any node, stretched by the fastest
    /// contender clock's ρ, plus how long a write may still commit after its
    /// sender stopped (the last holder's final renewal may land that late),
    /// plus the slowest contender's lock-delay and k attempts, plus five
    /// ticks of timer rounding.
    pub fn takeover_bound_us(&self, contenders: &[String]) -> u64 {
        let ttl_us = self.facts.iter().map(|facts| facts.ttl_us).max().unwrap_or(0).max(self.foreign_ttl_us);
        let contending: Vec<&NodeFacts> = contenders.iter().filter_map(|name| self.node(name)).collect();
        let rho = contending.iter().map(|facts| facts.drift_bound).fold(0.0, f64::max);
        let acting = contending
            .iter()
            .map(|facts| facts.lock_delay_us.saturating_add(facts.attempt_us.saturating_mul(u64::from(self.attempts))))
            .max()
            .unwrap_or(0);
        ((ttl_us as f64 * (1.0 + rho)).round() as u64)
            .saturating_add(self.in_flight_us)
            .saturating_add(acting)
            .saturating_add(5 * self.tick_us)
    }
}

/// One node's settings, as the checkers need them.
#[derive(Clone, Debug, Default)]
pub struct NodeFacts {
    /// The node's host name.
    pub name: String,
    /// Its elector's lock-delay, in µs.
    pub lock_delay_us: u64,
    /// Its clock's rate against true time (1 + drift).
    pub rate: f64,
    /// ρ, the drift bound its elector is configured with.
    pub drift_bound: f64,
    /// Its elector's TTL, in µs: what contenders wait out after its terms.
    pub ttl_us: u64,
    /// The time its terms keep back for work to stop, in µs: a keyed
    /// member's term ends this much before TTL·(1−ρ)/(1+ρ).
    pub stop_margin_us: u64,
    /// One read-and-write attempt: the longest gap between its reads (a
    /// poll, or the longest advertised renew interval) + 3 × request
    /// timeout (a read, a write, and the read-back of a write whose reply
    /// was lost), in µs.
    pub attempt_us: u64,
}

/// The least true time, in µs, in which a node whose clock runs at `rate`
/// can let `wait_us` of its own time pass: a fast clock makes a wait
/// shorter in true time; one tick is allowed for timer rounding. Every
/// checker of a wait (lock-delays, foreign records) bounds it so.
pub fn least_true_wait_us(wait_us: u64, rate: f64, tick_us: u64) -> u64 {
    ((wait_us as f64 / rate.max(0.5)) as u64).saturating_sub(tick_us)
}

/// How much of `start..end` (µs) lies outside every one of `pauses`: the
/// time a process could act in that span, since a paused process does
/// nothing.
pub fn unpaused_us(start: u64, end: u64, pauses: &[(u64, u64)]) -> u64 {
    if end <= start {
        return 0;
    }
    let mut clipped: Vec<(u64, u64)> =
        pauses.iter().map(|&(from, to)| (from.max(start), to.min(end))).filter(|(from, to)| from < to).collect();
    clipped.sort_unstable();
    let mut paused = 0;
    let mut cursor = start;
    for (from, to) in clipped {
        let from = from.max(cursor);
        if to > from {
            paused += to - from;
            cursor = to;
        }
    }
    (end - start) - paused
}

/// Runs every checker.
pub fn check_all(entries: &[Entry], context: &Context) -> Vec<Violation> {
    let mut violations = Vec::new();
    if context.keyed.is_some() {
        // Keyed members hold no election lease: the lease checkers have
        // nothing to read, and the keyed ones replace them.
        let acting = keyed_acting::intervals(entries);
        keyed_one_writer::check(&acting, &mut violations);
        keyed_rounds::check(&acting, &mut violations);
        keyed_fencing::check(entries, &acting, &mut violations);
        if context.keyed.as_ref().is_some_and(|keyed| !keyed.leases_per_key) {
            keyed_settled::check(&acting, context, &mut violations);
            keyed_term::check(entries, &acting, context, &mut violations);
            keyed_moves::check(entries, &acting, context, &mut violations);
            keyed_lock_delay::check(entries, &acting, context, &mut violations);
        }
        keyed_handle_truthful::check(entries, &acting, context, &mut violations);
        campaign_ended::check(entries, &mut violations);
        action_skipped::check(entries, &mut violations);
        violations.sort_by_key(|violation| (violation.at_us, violation.property));
        return violations;
    }
    one_holder_per_generation::check(entries, &mut violations);
    monotone_fencing::check(entries, &mut violations);
    belief_overlap::check(entries, context, &mut violations);
    lock_delay::check(entries, context, &mut violations);
    foreign_wait::check(entries, context, &mut violations);
    release_after_work::check(entries, &mut violations);
    liveness::check(entries, context, &mut violations);
    linearizable::check(entries, &mut violations);
    nobody_led::check(entries, context, &mut violations);
    campaign_ended::check(entries, &mut violations);
    action_skipped::check(entries, &mut violations);
    observe_truthful::check(entries, context, &mut violations);
    stop_honoured::check(entries, context, &mut violations);
    events_truthful::check(entries, &mut violations);
    violations.sort_by_key(|violation| (violation.at_us, violation.property));
    violations
}

/// One node's terms as the history shows them: (node, generation, start,
/// end) with the end at the step-down, the crash or the end of the run.
pub fn terms(entries: &[Entry], end_us: u64) -> Vec<Term> {
    // Open terms, each with the windows after a suspend in which it may
    // still be believed (see [`excuse_waking`]).
    let mut open: Vec<(Term, Vec<(u64, u64)>)> = Vec::new();
    let mut closed = Vec::new();
    let close = |(mut term, woke): (Term, Vec<(u64, u64)>), at_us: u64| {
        term.end_us = at_us;
        excuse_waking(&mut term.paused, &woke, at_us);
        term
    };
    for entry in entries {
        match &entry.event {
            Event::Acquired { generation } => open.push((
                Term {
                    node: entry.node.clone(),
                    generation: *generation,
                    start_us: entry.at_us,
                    end_us,
                    paused: Vec::new(),
                },
                Vec::new(),
            )),
            Event::Stepped { generation, .. } => {
                if let Some(index) = open.iter().position(|(t, _)| t.node == entry.node && t.generation == *generation)
                {
                    closed.push(close(open.remove(index), entry.at_us));
                }
            }
            Event::Crashed => {
                while let Some(index) = open.iter().position(|(t, _)| t.node == entry.node) {
                    closed.push(close(open.remove(index), entry.at_us));
                }
            }
            Event::Paused { until_us } => {
                for (term, _) in open.iter_mut().filter(|(t, _)| t.node == entry.node) {
                    term.paused.push((entry.at_us, *until_us));
                }
            }
            Event::Suspended { until_us, stops_by_us } => {
                for (term, woke) in open.iter_mut().filter(|(t, _)| t.node == entry.node) {
                    term.paused.push((entry.at_us, *until_us));
                    woke.push((*until_us, *stops_by_us));
                }
            }
            _ => {}
        }
    }
    closed.extend(open.into_iter().map(|(term, _)| term));
    closed.sort_by_key(|term| (term.start_us, term.node.clone()));
    closed
}

/// A node that wakes from a suspend to find its term over stops within the
/// suspend bound (I9a), acting meanwhile only as a paused process may: the
/// time from waking to its stop counts as paused, when the stop falls in
/// the bound. A term that outlived the suspend was rightly believed after
/// waking, and its waking window is not excused: a contender that took
/// over then is caught.
pub fn excuse_waking(paused: &mut Vec<(u64, u64)>, woke: &[(u64, u64)], end_us: u64) {
    for &(until_us, stops_by_us) in woke {
        if until_us <= end_us && end_us <= stops_by_us {
            paused.push((until_us, end_us));
        }
    }
}

/// A term of leadership as one node believed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// The node.
    pub node: String,
    /// Its generation.
    pub generation: u64,
    /// When its context was handed out, in µs.
    pub start_us: u64,
    /// When it ended, in µs.
    pub end_us: u64,
    /// Stop-the-world pauses during the term: a paused process believes
    /// nothing, so these spans do not count as belief.
    pub paused: Vec<(u64, u64)>,
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::history::{Entry, Event};

    /// An entry at `at_ms` milliseconds.
    pub fn at(at_ms: u64, node: &str, event: Event) -> Entry {
        Entry { at_us: at_ms * 1000, node: node.into(), event }
    }
}
