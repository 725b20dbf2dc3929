//! A linearizability checker for the history of one lease key.
//!
//! # Why
//!
//! hoplock's safety rests on the object store behaving like an atomic
//! compare-and-swap register for the key that holds the lease record: a
//! conditional write must see the latest state, and two clients must never
//! both win the same race. This module decides, from the outside, whether a
//! recorded history of operations on that key could have been produced by
//! such a register. The simulator uses it to audit its fake S3, and a command
//! line validator can use it to audit a real provider after hammering it with
//! concurrent conditional writes. It therefore knows nothing about either: it
//! takes plain data (a slice of [`Operation`]s) and returns a [`Verdict`].
//!
//! # The model
//!
//! The register holds `Option<Version>`: `None` while the key is missing,
//! `Some(v)` while it holds version `v`. A [`Version`] is an opaque `u64` id
//! chosen by the caller. The checker only compares versions for equality, so
//! callers must make every write distinguishable (the lease record carries a
//! nonce, so number the writes) and translate whatever the store exposes into
//! those ids: the version a read returns is the id of the write whose body it
//! read, and the `expected` version of a conditional write is the id of the
//! write that produced the ETag it sends in `If-Match`. Reusing an id for two
//! writes is allowed but makes the check weaker, since the checker cannot tell
//! those writes apart.
//!
//! The operations and the answers they may get are:
//!
//! * [`Call::Read`] answers [`Outcome::Missing`] or [`Outcome::Value`].
//! * [`Call::Create`] (`PUT` with `If-None-Match: *`) answers
//!   [`Outcome::Ok`] if the key was missing, and [`Outcome::Refused`] (412) if
//!   it existed.
//! * [`Call::Update`] (`PUT` with `If-Match`) answers `Ok` if the key held the
//!   expected version, and `Refused` (412, or 404 when the key is missing)
//!   otherwise.
//! * [`Call::Delete`] (`DELETE` with `If-Match`) is the same, leaving the key
//!   missing on success.
//! * [`Call::Put`] (unconditional `PUT`) always answers `Ok`.
//!
//! A refused write has no effect, but the refusal is itself an observation:
//! at the instant the write takes effect its condition must be false. A write
//! that got no definite answer (timeout, dropped reply, 5xx) is
//! [`Reply::Indeterminate`]: it may have taken effect at any instant after its
//! invocation, however late, or never, and the checker tries both. Callers
//! should drop reads that got no answer (an indeterminate read is accepted
//! and ignored, which is the same thing), and should also drop writes that
//! definitely had no effect but whose refusal says nothing about the state,
//! such as S3's 409 `ConditionalRequestConflict`; if unsure whether such a
//! write happened, record it as indeterminate.
//!
//! Times are caller-supplied `u64`s (nanoseconds, or simulated ticks); the
//! checker never reads a clock. Operation `a` precedes `b` in real time when
//! `a` returned strictly before `b` was invoked; intervals that merely touch
//! count as concurrent, the permissive reading, so clock granularity cannot
//! produce a false alarm. Record invocations before sending and responses
//! after receiving: wider intervals only make the check more lenient.
//!
//! # The algorithm
//!
//! A history is linearizable when the operations that took effect can be put
//! in one sequence that respects real time (if `a` returned before `b` was
//! invoked, `a` comes first) and in which every answer is the one the register
//! would give. All completed operations must appear in the sequence;
//! indeterminate writes may appear or not.
//!
//! Because there is a single key, the history cannot be split into
//! independent parts, so the checker searches for the sequence directly, in
//! the style of Wing and Gong as improved by Lowe and popularised by the
//! Porcupine checker. The invocations and responses of the completed
//! operations are put in one list sorted by time. The search repeatedly
//! extends a prefix of the linearization with an operation invoked no later
//! than the earliest response of a completed operation not yet in the
//! prefix: an operation invoked after some pending operation returned cannot
//! be linearized before it. Candidates are tried in invocation order, each
//! only if the register in its current state would have given the recorded
//! answer. A chosen operation is unlinked from the list (its invocation and
//! its response), so the next candidates are found by walking the list from
//! the start again, and relinked when the search backtracks.
//!
//! Indeterminate writes have no response, so they never bound the
//! candidates; once invoked they stay candidates for the rest of the search.
//! An indeterminate write is only ever linearized as taking effect; leaving
//! it out covers the case in which it did not (or in which it was refused,
//! which has no effect either).
//!
//! The search alone is exponential in the number of concurrent operations.
//! Several observations keep it tractable:
//!
//! * Memoisation. Whether a prefix can be completed depends only on which
//!   operations it contains and on the register's state after it, not on
//!   their order. The checker remembers every (set, state) pair it has
//!   entered and never enters one twice: if it is met again, the first visit
//!   already failed. Sets are bitsets; because every completed operation
//!   invoked far enough in the past must already be in the set, the key
//!   stores only a small window of the completed operations' bits (plus the
//!   indeterminate writes' bits), which keeps the memo compact on long
//!   histories.
//! * Dominance. If a candidate never changes the state (a read or a refused
//!   write) and its answer fits the current state, linearizing it now is
//!   never worse than any alternative: any completion that places it later
//!   can be rearranged to place it first, since moving it changes no other
//!   operation's view of the register and it was invoked before every
//!   pending response. So the checker takes such a candidate first when there
//!   is one, and if it fails, does not try its siblings. (A write of the
//!   version already there does not qualify: at a later point the same write
//!   could change the state.)
//! * Unobserved versions. A version that no remaining operation tests for
//!   (no read returns it, no conditional write expects it) is
//!   indistinguishable from any other such version for the rest of the
//!   history, so the memo treats them as one state.
//! * Lost writes only where they matter. In any linearization, an
//!   indeterminate write that is not immediately followed by an operation it
//!   enables (one whose answer fits the state the write installs but not the
//!   state before it) can be moved past the next operation if that one has
//!   no effect, or dropped if that one overwrites it. So the checker only
//!   tries an indeterminate write where some candidate would be enabled by
//!   it, and only the earliest of several with the same condition and the
//!   same effect, since those are interchangeable. Without this, every lost
//!   write would be tried at every later point of the history.
//!
//! A legal history with modest concurrency is usually accepted in a few
//! steps per operation. A history that is not linearizable may require the
//! search to exhaust every reachable (set, state) pair before the violation,
//! which grows with the number of overlapping operations and of lost writes
//! whose versions are still observed later; the [`Checker`] therefore has a
//! step budget and answers [`Verdict::Unknown`] when it runs out, never a
//! guess. Each step adds at most one memo entry of a few dozen bytes.

mod history;
mod search;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;

pub use history::{Call, HistoryError, OpId, Operation, Outcome, RecordError, Recorder, Reply};

/// An opaque version id (see the module documentation for how to map ETags and
/// nonces onto ids).
pub type Version = u64;

/// A caller-supplied instant, such as nanoseconds since the start of the run.
pub type Time = u64;

/// Identifies the client that issued an operation, for reports only.
pub type ClientId = u64;

/// The largest history the checker accepts.
pub const MAX_OPERATIONS: usize = 1 << 30;

/// The default step budget of [`Checker`] and [`check`]. Legal histories of a
/// few thousand operations need a few steps per operation; exhausting this
/// budget takes a couple of seconds and up to a few hundred megabytes of memo.
pub const DEFAULT_MAX_STEPS: u64 = 10_000_000;

/// The conclusion of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The history is linearizable.
    Linearizable {
        /// A witness: the positions in the history of every completed
        /// operation and of the indeterminate writes that this witness has
        /// taking effect, in an order that respects real time and that a
        /// sequential register would answer as recorded. Indeterminate
        /// operations absent from it are taken not to have happened.
        order: Vec<usize>,
    },
    /// No linearization exists.
    NotLinearizable(Counterexample),
    /// The step budget ran out before the search concluded.
    Unknown {
        /// Steps taken.
        steps: u64,
    },
}

impl Verdict {
    /// Whether the verdict is [`Verdict::Linearizable`].
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable { .. })
    }

    /// Whether the verdict is [`Verdict::NotLinearizable`].
    pub fn is_violation(&self) -> bool {
        matches!(self, Verdict::NotLinearizable(_))
    }
}

/// Where the search got stuck on a history that is not linearizable.
///
/// The checker reports the furthest it got, counted in completed operations:
/// a prefix of a would-be linearization after which the register is in
/// [`state`](Counterexample::state) and none of the completed operations
/// that could come next (listed in [`candidates`](Counterexample::candidates))
/// got an answer the register would give in that state. Lost writes that
/// could still have taken effect there did not lead further either. Other
/// prefixes were tried and got no further, so this is a place to start
/// reading, not necessarily the faulty operation itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counterexample {
    /// Positions in the history of the longest linearizable prefix found, in
    /// linearization order.
    pub prefix: Vec<usize>,
    /// The register's state after the prefix.
    pub state: Option<Version>,
    /// Positions of the completed operations that were eligible to come next
    /// (invoked before [`blocking`](Counterexample::blocking) returned), none
    /// of which fits `state`.
    pub candidates: Vec<usize>,
    /// Position of the completed operation outside the prefix that returned
    /// first: something eligible had to be linearized before its response.
    pub blocking: Option<usize>,
}

impl Counterexample {
    /// A human-readable account of the counterexample against `history`,
    /// showing the last `context` operations of the prefix.
    pub fn explain(&self, history: &[Operation], context: usize) -> String {
        let mut out = String::new();
        let shown = self.prefix.len().saturating_sub(context);
        let _ = writeln!(out, "linearized {} operations; the last {}:", self.prefix.len(), self.prefix.len() - shown);
        for &i in &self.prefix[shown..] {
            if let Some(op) = history.get(i) {
                let _ = writeln!(out, "  #{i}: {op}");
            }
        }
        match self.state {
            Some(v) => {
                let _ = writeln!(out, "the register then holds {v}, and no operation fits:");
            }
            None => {
                let _ = writeln!(out, "the key is then missing, and no operation fits:");
            }
        }
        for &i in &self.candidates {
            if let Some(op) = history.get(i) {
                let mark = if Some(i) == self.blocking { " (returned first)" } else { "" };
                let _ = writeln!(out, "  #{i}: {op}{mark}");
            }
        }
        out
    }
}

/// A configurable linearizability checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checker {
    max_steps: u64,
    initial: Option<Version>,
}

impl Default for Checker {
    fn default() -> Self {
        Self::new()
    }
}

impl Checker {
    /// A checker with [`DEFAULT_MAX_STEPS`] and a key that starts missing.
    pub fn new() -> Self {
        Checker { max_steps: DEFAULT_MAX_STEPS, initial: None }
    }

    /// Sets the step budget; past it the verdict is [`Verdict::Unknown`].
    pub fn max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Sets the register's state before the first operation (default: the
    /// key is missing).
    pub fn initial_state(mut self, initial: Option<Version>) -> Self {
        self.initial = initial;
        self
    }

    /// Checks `history`; see [`check`].
    pub fn check(&self, history: &[Operation]) -> Result<Verdict, HistoryError> {
        search::validate(history)?;
        let search = search::Search::new(history, self.initial);
        Ok(search.run(history, self.initial, self.max_steps))
    }
}

/// Checks whether `history` is linearizable with respect to a
/// compare-and-swap register that starts missing, within
/// [`DEFAULT_MAX_STEPS`]. Use [`Checker`] to change either.
///
/// The operations may come in any order; verdicts refer to them by position.
///
/// # Errors
///
/// [`HistoryError`] if an operation returned before it was invoked, carries
/// an outcome its call cannot produce, or the history is too long.
///
/// # Example
///
/// Two clients race to create the lease; both are told they won, which an
/// atomic register cannot do.
///
/// ```
/// use hoplock_testkit::linearizability::{check, Call, Operation, Outcome, Verdict};
///
/// let race = |ok_b| {
///     vec![
///         Operation::completed(1, Call::Create { value: 1 }, 0, 10, Outcome::Ok),
///         Operation::completed(2, Call::Create { value: 2 }, 5, 15, ok_b),
///         Operation::completed(1, Call::Read, 20, 30, Outcome::Value(1)),
///     ]
/// };
/// let verdict = check(&race(Outcome::Refused)).unwrap();
/// assert_eq!(verdict, Verdict::Linearizable { order: vec![0, 1, 2] });
/// assert!(check(&race(Outcome::Ok)).unwrap().is_violation());
/// ```
pub fn check(history: &[Operation]) -> Result<Verdict, HistoryError> {
    Checker::new().check(history)
}
