//! The lease record and its fencing token.

use serde::{Deserialize, Serialize};

/// A fencing token: the lease's generation, strictly increasing for the life
/// of a lease key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The generation before any lease has been written.
    pub const ZERO: Generation = Generation(0);

    /// The token as a plain integer.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The next generation, saturating at `u64::MAX`.
    pub const fn next(self) -> Generation {
        Generation(self.0.saturating_add(1))
    }
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
