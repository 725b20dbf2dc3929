//! The fenced downstream resource the leaders write to.
//!
//! It stands for whatever the elected writer guards, and it guards itself
//! the way the library tells users to: with [`hoplock::fence::Fence`], the
//! token check and the write done as one step (nothing awaits in between,
//! and the simulation runs on one thread). Because the production check is
//! the one in use, a bug in it shows up here as a token going down, which
//! the monotone-fencing checker reads in the order the resource stored the
//! writes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
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
    /// In keyed worlds, one fence per key, checking the key's round.
    keys: Rc<RefCell<BTreeMap<u32, Fence>>>,
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

    /// Writes key `k{key}` on behalf of a keyed member's `incarnation`,
    /// fenced by `round`, sent at `sent_us`; records the outcome.
    pub fn write_key(&self, history: &History, node: &str, key: u32, round: u64, incarnation: String, sent_us: u64) {
        let mut keys = self.keys.borrow_mut();
        let fence = keys.entry(key).or_default();
        let highest_before = fence.highest().get();
        let accepted = fence.check(Generation(round)).is_ok();
        let sequence = self.writes.get() + 1;
        self.writes.set(sequence);
        let event = Event::KeyDownstream { key, round, incarnation, sent_us, accepted, highest_before, sequence };
        history.record_now(node, event);
    }
}
