//! The `[chaos]` table of a scenario file: what only the chaos harness
//! (`cargo xtask chaos`) reads, because only real processes and real sockets
//! have it. The simulator ignores the table, so one file describes a world
//! for both engines; the harness maps the rest of the file onto real
//! processes and refuses what it cannot map.

use serde::{Deserialize, Serialize};

/// What a scenario says to the chaos harness alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChaosSpec {
    /// How many runs `cargo xtask chaos` makes of the world by default, each
    /// with its own seed for the fault draws. Real runs take real time, so
    /// this is small.
    #[serde(default = "one")]
    pub runs: u64,
    /// Faults that exist only between real processes and a real server, at
    /// set times, beside the file's own `schedule`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<ChaosScheduled>,
}

fn one() -> u64 {
    1
}

/// A chaos-only fault at a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChaosScheduled {
    /// When, in milliseconds from the start of the run.
    pub at_ms: u64,
    /// What.
    #[serde(flatten)]
    pub action: ChaosAction,
}

/// The faults only the chaos harness has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ChaosAction {
    /// Every open connection between the node and the store is reset (a
    /// load balancer or a NAT table dropping them): a request in flight on
    /// one fails at once, with no answer.
    ResetConnections {
        /// The node whose connections are reset (`@leader` for the leader).
        node: String,
    },
    /// For `for_ms`, every request body the node sends is cut off in the
    /// middle and both connections are closed: the store sees half a
    /// request and must apply none of it.
    HangUpBodies {
        /// The node (`@leader` for the leader).
        node: String,
        /// How long.
        for_ms: u64,
    },
}

impl ChaosAction {
    /// The node the fault is aimed at.
    pub fn node(&self) -> &str {
        match self {
            ChaosAction::ResetConnections { node } | ChaosAction::HangUpBodies { node, .. } => node,
        }
    }

    /// How the history labels it.
    pub fn label(&self) -> String {
        match self {
            ChaosAction::ResetConnections { node } => format!("reset-connections {node}"),
            ChaosAction::HangUpBodies { node, for_ms } => format!("hang-up-bodies {node} {for_ms}ms"),
        }
    }
}
