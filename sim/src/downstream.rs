//! The fenced downstream resource the leaders write to.
//!
//! It stands for whatever the elected writer guards: it remembers the
//! highest generation it has accepted and rejects lower ones, atomically
//! with the write (one mutex), as the library's docs tell users to do.

use std::cell::Cell;
use std::rc::Rc;

use crate::history::{Event, History};

/// A resource that accepts writes carrying a generation at least as high as
/// the highest it has seen.
#[derive(Clone, Debug, Default)]
pub struct Downstream {
    highest: Rc<Cell<u64>>,
}

impl Downstream {
    /// Writes on behalf of `node` with fencing token `generation`, records
    /// the outcome, and returns whether it was accepted.
    pub fn write(&self, history: &History, node: &str, generation: u64) -> bool {
        let highest_before = self.highest.get();
        let accepted = generation >= highest_before;
        if accepted {
            self.highest.set(generation);
        }
        history.record_now(node, Event::Downstream { generation, accepted, highest_before });
        accepted
    }
}
