//! The fenced downstream resource the leaders write to.
//!
//! It stands for whatever the elected writer guards, and it guards itself
//! the way the library tells users to: with [`hoplock::fence::Fence`], the
//! token check and the write done as one step (nothing awaits in between,
//! and the simulation runs on one thread). Because the production check is
//! the one in use, a bug in it shows up here as a token going down, which
//! the monotone-fencing checker reads in the order the resource stored the
//! writes.

use std::cell::Cell;
use std::rc::Rc;

use hoplock::Generation;
use hoplock::fence::Fence;

use crate::history::{Event, History};

/// A resource that accepts writes carrying a generation at least as high as
/// the highest it has seen.
#[derive(Clone, Debug, Default)]
pub struct Downstream {
    fence: Rc<Fence>,
    /// How many writes it has stored: each write's place in its order.
    writes: Rc<Cell<u64>>,
}

impl Downstream {
    /// Writes on behalf of `node` with fencing token `generation`, records
    /// the outcome, and returns whether it was accepted.
    pub fn write(&self, history: &History, node: &str, generation: u64) -> bool {
        let highest_before = self.fence.highest().get();
        let accepted = self.fence.check(Generation(generation)).is_ok();
        let sequence = self.writes.get() + 1;
        self.writes.set(sequence);
        history.record_now(node, Event::Downstream { generation, accepted, highest_before, sequence });
        accepted
    }
}
