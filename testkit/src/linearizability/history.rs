//! The data a history is made of, and a recorder that builds one from
//! concurrent code without reading any clock.

use std::fmt;

use super::{ClientId, Time, Version};

/// What a client asked the register to do.
///
/// Versions are opaque `u64` ids chosen by the caller (see the module
/// documentation for how ETags and nonces map onto them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// `GET`: read the current version, or learn that the key is missing.
    Read,
    /// `PUT` with `If-None-Match: *`: write `value` only if the key is missing.
    Create {
        /// The version this write installs.
        value: Version,
    },
    /// `PUT` with `If-Match: expected`: replace `expected` by `new`.
    Update {
        /// The version the key must hold for the write to happen.
        expected: Version,
        /// The version this write installs.
        new: Version,
    },
    /// `DELETE` with `If-Match: expected`: remove the key if it holds `expected`.
    Delete {
        /// The version the key must hold for the delete to happen.
        expected: Version,
    },
    /// Unconditional `PUT`: always installs `value`.
    Put {
        /// The version this write installs.
        value: Version,
    },
    /// Unconditional `DELETE`: always leaves the key missing.
    Remove,
}

impl Call {
    /// Whether the call can change the register (everything but a read).
    pub fn is_write(&self) -> bool {
        !matches!(self, Call::Read)
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Read => write!(f, "read"),
            Call::Create { value } => write!(f, "create({value})"),
            Call::Update { expected, new } => write!(f, "update({expected} -> {new})"),
            Call::Delete { expected } => write!(f, "delete({expected})"),
            Call::Remove => f.write_str("remove()"),
            Call::Put { value } => write!(f, "put({value})"),
        }
    }
}

/// What the register answered.
///
/// Reads answer [`Outcome::Missing`] or [`Outcome::Value`]; writes answer
/// [`Outcome::Ok`] or [`Outcome::Refused`] (an unconditional
/// [`Call::Put`] can only answer `Ok`). Any other pairing is rejected by the
/// checker as [`HistoryError::OutcomeMismatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A read found no object under the key (404).
    Missing,
    /// A read found the object holding this version.
    Value(Version),
    /// A write took effect (200/204).
    Ok,
    /// A conditional write was refused because its condition did not hold
    /// (412, or 404 for an `If-Match` write on a missing key). It had no effect.
    Refused,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Missing => write!(f, "missing"),
            Outcome::Value(v) => write!(f, "value {v}"),
            Outcome::Ok => write!(f, "ok"),
            Outcome::Refused => write!(f, "refused"),
        }
    }
}

/// How an operation ended, as far as its client knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// The client received a definite answer at time `at`.
    Received {
        /// When the answer arrived; must not precede the invocation.
        at: Time,
        /// The answer.
        outcome: Outcome,
    },
    /// No definite answer (timeout, dropped reply, 5xx, or still in flight
    /// when the history was taken). A write in this state may have taken
    /// effect at any instant after its invocation, or never; a read in this
    /// state tells nothing and is ignored.
    Indeterminate,
}

/// One operation of the history: who called what, when, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operation {
    /// The client that issued the operation. Only used in reports: the
    /// checker derives ordering from times, never from client identity.
    pub client: ClientId,
    /// What was asked.
    pub call: Call,
    /// When the request was sent.
    pub invoke: Time,
    /// How it ended.
    pub reply: Reply,
}

impl Operation {
    /// An operation that returned `outcome` at `response`.
    pub fn completed(client: ClientId, call: Call, invoke: Time, response: Time, outcome: Outcome) -> Self {
        Operation { client, call, invoke, reply: Reply::Received { at: response, outcome } }
    }

    /// An operation whose effect is unknown (see [`Reply::Indeterminate`]).
    pub fn indeterminate(client: ClientId, call: Call, invoke: Time) -> Self {
        Operation { client, call, invoke, reply: Reply::Indeterminate }
    }

    /// The response time, or `None` when the operation is indeterminate.
    pub fn response(&self) -> Option<Time> {
        match self.reply {
            Reply::Received { at, .. } => Some(at),
            Reply::Indeterminate => None,
        }
    }

    /// The outcome, or `None` when the operation is indeterminate.
    pub fn outcome(&self) -> Option<Outcome> {
        match self.reply {
            Reply::Received { outcome, .. } => Some(outcome),
            Reply::Indeterminate => None,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client {} {} ", self.client, self.call)?;
        match self.reply {
            Reply::Received { at, outcome } => {
                write!(f, "[{}, {}] -> {}", self.invoke, at, outcome)
            }
            Reply::Indeterminate => write!(f, "[{}, ?] -> indeterminate", self.invoke),
        }
    }
}

/// A history that cannot be checked because it is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// An operation's response precedes its invocation.
    #[error("operation {index} returned at {response}, before it was invoked at {invoke}")]
    ResponseBeforeInvoke {
        /// Position of the operation in the history.
        index: usize,
        /// Its invocation time.
        invoke: Time,
        /// Its response time.
        response: Time,
    },
    /// An outcome that the call cannot produce, such as a read answering
    /// `Ok` or an unconditional put being refused.
    #[error("operation {index}: {call} cannot answer {outcome}")]
    OutcomeMismatch {
        /// Position of the operation in the history.
        index: usize,
        /// The call.
        call: Call,
        /// The impossible outcome.
        outcome: Outcome,
    },
    /// More operations than the checker indexes
    /// ([`MAX_OPERATIONS`](super::MAX_OPERATIONS)).
    #[error("history has {len} operations; at most {} are supported", super::MAX_OPERATIONS)]
    TooLong {
        /// The history's length.
        len: usize,
    },
}

/// Identifies an operation recorded by a [`Recorder`]; its
/// [`index`](OpId::index) is the operation's position in the history, which is
/// also how verdicts refer to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(usize);

impl OpId {
    /// The operation's position in the recorded history.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Misuse of a [`Recorder`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The id was not issued by this recorder.
    #[error("operation {} was not recorded here", .0.index())]
    UnknownOp(OpId),
    /// The operation already received a completion or was marked indeterminate.
    #[error("operation {} already ended", .0.index())]
    AlreadyEnded(OpId),
}

/// Builds a history from code that issues operations concurrently.
///
/// Call [`invoke`](Recorder::invoke) just before sending a request and
/// [`complete`](Recorder::complete) just after its answer arrives, passing the
/// times explicitly (simulated time in the simulator, a monotonic clock read by
/// the caller elsewhere). Recording the invocation before sending and the
/// response after receiving only widens the interval, which never turns a
/// linearizable execution into a non-linearizable history.
///
/// An operation that never gets [`complete`](Recorder::complete)d is
/// indeterminate: a write may or may not have happened, and a read is
/// ignored. [`indeterminate`](Recorder::indeterminate) records that
/// explicitly and protects the operation from a late completion.
///
/// The recorder takes `&mut self`; share it between tasks behind a mutex.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    ops: Vec<Operation>,
    ended: Vec<bool>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `client` issued `call` at time `at`.
    pub fn invoke(&mut self, client: ClientId, call: Call, at: Time) -> OpId {
        let id = OpId(self.ops.len());
        self.ops.push(Operation::indeterminate(client, call, at));
        self.ended.push(false);
        id
    }

    /// Records that operation `id` answered `outcome` at time `at`.
    pub fn complete(&mut self, id: OpId, outcome: Outcome, at: Time) -> Result<(), RecordError> {
        self.end(id)?;
        if let Some(op) = self.ops.get_mut(id.0) {
            op.reply = Reply::Received { at, outcome };
        }
        Ok(())
    }

    /// Records that operation `id` will never get a definite answer.
    pub fn indeterminate(&mut self, id: OpId) -> Result<(), RecordError> {
        self.end(id)
    }

    fn end(&mut self, id: OpId) -> Result<(), RecordError> {
        match self.ended.get_mut(id.0) {
            None => Err(RecordError::UnknownOp(id)),
            Some(true) => Err(RecordError::AlreadyEnded(id)),
            Some(ended) => {
                *ended = true;
                Ok(())
            }
        }
    }

    /// The history so far; operations still in flight are indeterminate.
    pub fn history(&self) -> &[Operation] {
        &self.ops
    }

    /// The finished history; operations still in flight are indeterminate.
    pub fn into_history(self) -> Vec<Operation> {
        self.ops
    }
}
