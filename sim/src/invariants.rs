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

/// What a checker reads: the run's history, what the runner knows of the
/// world, and in keyed worlds each key's acting intervals (read once for
/// every keyed checker).
pub struct Run<'a> {
    pub entries: &'a [Entry],
    pub context: &'a Context,
    pub acting: &'a keyed_acting::Intervals,
}

/// The worlds a checker judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worlds {
    /// Worlds of electors.
    Elector,
    /// Every keyed world, the per-key-lease baseline included.
    Keyed,
    /// Keyed worlds whose members share keys by HRW views (not the
    /// baseline).
    KeyedViews,
    /// Every world.
    All,
}

impl Worlds {
    /// Whether a checker registered for `self` judges a world of `kind`
    /// (`Elector`, `Keyed` for the baseline, or `KeyedViews`).
    fn judge(self, kind: Worlds) -> bool {
        match self {
            Worlds::All => true,
            Worlds::Keyed => kind != Worlds::Elector,
            judged => judged == kind,
        }
    }
}

/// One registered checker.
pub struct Checker {
    /// The property it judges.
    pub property: Property,
    /// The name scenario files use.
    pub name: &'static str,
    /// Whether breaking it means two writers or a token going down, as
    /// opposed to a run that led too little or tested too little.
    pub safety: bool,
    /// The worlds it judges.
    pub worlds: Worlds,
    /// What breaking it looks like, in words.
    pub summary: &'static str,
    /// Checks one run.
    pub check: fn(&Run<'_>, &mut Vec<Violation>),
}

/// Declares the [`Property`] enum and the [`CHECKERS`] registry from one
/// line per checker, so that a checker is registered in one place.
macro_rules! checkers {
    ($( $(#[$doc:meta])* $variant:ident: $name:literal, $kind:ident, $worlds:ident, $summary:literal, $check:expr; )*) => {
        /// The properties, as the safety rules in ARCHITECTURE.md number
        /// them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum Property {
            $( $(#[$doc])* $variant, )*
        }

        /// Every checker, in report order (the order of [`Property`]).
        pub const CHECKERS: &[Checker] = &[
            $( Checker {
                property: Property::$variant,
                name: $name,
                safety: checkers!(@safety $kind),
                worlds: Worlds::$worlds,
                summary: $summary,
                check: $check,
            }, )*
        ];
    };
    (@safety safety) => { true };
    (@safety other) => { false };
}

impl Property {
    /// Every property, in report order.
    pub const ALL: [Property; CHECKERS.len()] = {
        let mut all = [Property::OneHolderPerGeneration; CHECKERS.len()];
        let mut index = 0;
        while index < CHECKERS.len() {
            all[index] = CHECKERS[index].property;
            index += 1;
        }
        all
    };

    /// Its registered checker.
    pub fn checker(self) -> &'static Checker {
        // The registry lists the properties in declaration order.
        &CHECKERS[self as usize]
    }

    /// The short name scenario files use.
    pub fn name(self) -> &'static str {
        self.checker().name
    }

    /// Whether breaking it means two writers or a token going down, as
    /// opposed to a run that led too little or tested too little.
    pub fn is_safety(self) -> bool {
        self.checker().safety
    }

    /// What breaking it looks like, in words.
    pub fn summary(self) -> &'static str {
        self.checker().summary
    }
}

// Every checker, registered once: its property (with the rule it judges),
// the name scenario files use, whether breaking it is a safety violation,
// the worlds it judges, what breaking it looks like, and the call that
// checks a run. Report order is the order here.
checkers! {
    /// I1: at most one node ever acquires a given generation.
    OneHolderPerGeneration: "one-holder-per-generation", safety, Elector, "two leaders in one generation",
        |run, out| one_holder_per_generation::check(run.entries, out);
    /// I2: accepted fencing tokens and the stored generation never go down.
    MonotoneFencing: "monotone-fencing", safety, Elector, "a fencing token went down",
        |run, out| monotone_fencing::check(run.entries, out);
    /// I3/I4: no two nodes believe they lead at the same instant.
    NoBeliefOverlap: "no-belief-overlap", safety, Elector, "two nodes believed they led at once",
        |run, out| belief_overlap::check(run.entries, run.context, out);
    /// I5: after an involuntary takeover the new leader waits out its
    /// lock-delay before acting.
    LockDelay: "lock-delay", safety, Elector, "a new leader acted before its lock-delay passed",
        |run, out| lock_delay::check(run.entries, run.context, out);
    /// I6: the lease is released only after the leader-only work stopped.
    ReleaseAfterWork: "release-after-work", safety, Elector, "the lease was released while the work still wrote",
        |run, out| release_after_work::check(run.entries, out);
    /// L1: someone leads soon after the faults stop or after a release.
    Liveness: "liveness", other, Elector, "nobody led when someone should have",
        |run, out| liveness::check(run.entries, run.context, out);
    /// The store's history is linearizable as a compare-and-swap register.
    Linearizable: "linearizable", safety, Elector, "the store's history is not linearizable",
        |run, out| linearizable::check(run.entries, out);
    /// No vacuous pass: somebody led at some point in the run.
    NobodyLed: "nobody-led", other, Elector, "nobody led in the whole run",
        |run, out| nobody_led::check(run.entries, run.context, out);
    /// No vacuous pass: no elector's campaign ended with an error.
    CampaignEnded: "campaign-ended", other, All, "an elector's campaign ended with an error",
        |run, out| campaign_ended::check(run.entries, out);
    /// No vacuous pass: every scheduled action was applied.
    ActionSkipped: "action-skipped", other, All, "a scheduled action was skipped",
        |run, out| action_skipped::check(run.entries, out);
    /// L3: what `Elector::observe` reports is true of the store.
    ObserveTruthful: "observe-truthful", other, Elector, "a follower's observe() reported something the store never held",
        |run, out| observe_truthful::check(run.entries, run.context, out);
    /// L4: a stopped elector starts no term.
    StopHonoured: "stop-honoured", other, Elector, "a stopped elector started a term",
        |run, out| stop_honoured::check(run.entries, run.context, out);
    /// L5: the elector's events announce and end each term once, and the
    /// loss reasons they give are true of the run.
    EventsTruthful: "events-truthful", other, Elector, "an elector's events misreported a term",
        |run, out| events_truthful::check(run.entries, out);
    /// K1: per key, at most one member incarnation acts at any instant.
    KeyedOneWriter: "keyed-one-writer", safety, Keyed, "two members acted for one key at once",
        |run, out| keyed_one_writer::check(run.acting, out);
    /// K2: no (key, round) is started by two incarnations, and per key
    /// rounds only rise from one holder to the next.
    KeyedRounds: "keyed-rounds", safety, Keyed, "a key's round was reused or went down",
        |run, out| keyed_rounds::check(run.acting, out);
    /// K3: after churn stops, every key has exactly one acting owner, the
    /// HRW owner over the live members, within the keyed crash bound.
    KeyedSettled: "keyed-settled", other, KeyedViews, "keys did not settle on their HRW owners in time",
        |run, out| keyed_settled::check(run.acting, run.context, out);
    /// K4: no key is acted on after its member's term ended.
    KeyedTerm: "keyed-term", safety, KeyedViews, "a member acted for a key after its term ended",
        |run, out| keyed_term::check(run.entries, run.acting, run.context, out);
    /// K5: a view change moves exactly the keys HRW predicts, and a key is
    /// started only by its owner in its round's view.
    KeyedMoves: "keyed-moves", safety, KeyedViews, "keys moved that HRW did not move, or started off their owner",
        |run, out| keyed_moves::check(run.entries, run.acting, run.context, out);
    /// K6: per key, the rounds the fenced downstream accepts never go down,
    /// and it never turns away the newest holder's writes.
    KeyedFencing: "keyed-fencing", safety, Keyed, "a key's fenced downstream accepted a lower round or shut out its newest holder",
        |run, out| keyed_fencing::check(run.entries, run.acting, out);
    /// I4 for foreign records: a record someone else wrote is waited out
    /// for its TTL (the assumed one if it states none), a deleted key for
    /// the last TTL, and an exhausted generation is never written over.
    ForeignWait: "foreign-wait", safety, Elector, "a foreign or deleted record was taken over before its wait, or an exhausted one written over",
        |run, out| foreign_wait::check(run.entries, run.context, out);
    /// K7: a key its holder lost involuntarily (an eviction, an object
    /// deleted under it) starts elsewhere only after the lock-delay.
    KeyedLockDelay: "keyed-lock-delay", safety, KeyedViews, "a key its holder lost involuntarily started elsewhere before the lock-delay",
        |run, out| keyed_lock_delay::check(run.entries, run.acting, run.context, out);
    /// K8: what a keyed member's handle reports (leases, members, view) is
    /// true of what the member does and of what the store committed.
    KeyedHandleTruthful: "keyed-handle-truthful", other, Keyed, "a member's handle reported a lease, members or a view that were not so",
        |run, out| keyed_handle_truthful::check(run.entries, run.acting, run.context, out);
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A broken property.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
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

/// The acting intervals of a keyed world's history, which its checkers and
/// its figures both read; none for an elector world, whose checkers do not.
pub fn acting_intervals(entries: &[Entry], context: &Context) -> keyed_acting::Intervals {
    if context.keyed.is_some() { keyed_acting::intervals(entries) } else { keyed_acting::Intervals::default() }
}

/// Runs every checker that judges this kind of world, in report order.
/// `acting` is [`acting_intervals`] of the same history, worked out once
/// for the checkers and the run's figures.
pub fn check_all(entries: &[Entry], context: &Context, acting: &keyed_acting::Intervals) -> Vec<Violation> {
    // Keyed members hold no election lease, so the lease checkers have
    // nothing to read there and the keyed ones replace them; the baseline's
    // keys follow no HRW view, so only the checkers that hold for any
    // single-writer scheme judge it.
    let kind = match &context.keyed {
        None => Worlds::Elector,
        Some(keyed) if keyed.leases_per_key => Worlds::Keyed,
        Some(_) => Worlds::KeyedViews,
    };
    let run = Run { entries, context, acting };
    let mut violations = Vec::new();
    for checker in CHECKERS.iter().filter(|checker| checker.worlds.judge(kind)) {
        (checker.check)(&run, &mut violations);
    }
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

#[cfg(test)]
mod registry_tests {
    use super::*;

    #[test]
    fn the_registry_follows_the_property_order_and_serde_names() {
        for (index, checker) in CHECKERS.iter().enumerate() {
            assert_eq!(checker.property as usize, index, "{} is out of order", checker.name);
            let serialized = serde_json::to_string(&checker.property).unwrap();
            assert_eq!(serialized, format!("\"{}\"", checker.name));
        }
    }

    #[test]
    fn each_kind_of_world_gets_its_checkers() {
        let judged = |kind| CHECKERS.iter().filter(|checker| checker.worlds.judge(kind)).count();
        assert_eq!(judged(Worlds::Elector), 14);
        assert_eq!(judged(Worlds::Keyed), 6);
        assert_eq!(judged(Worlds::KeyedViews), 10);
    }
}
