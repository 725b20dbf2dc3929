//! What the front end answers and reports: the reply to a request, a
//! request's outcome, and the event an observer receives for each.

use super::*;

/// What the front end does with a request.
#[derive(Debug)]
pub enum Reply {
    /// Send this response.
    Respond(Response<Bytes>),
    /// Close the connection without answering: the request may have been
    /// applied, and the client cannot tell.
    DropConnection,
    /// Never answer and keep the connection open: the client learns
    /// nothing until its own timeout.
    Silence,
}

impl Reply {
    /// The response, unless the reply is dropped.
    pub fn response(&self) -> Option<&Response<Bytes>> {
        match self {
            Reply::Respond(response) => Some(response),
            Reply::DropConnection | Reply::Silence => None,
        }
    }
}

/// What became of one object request, as the observer hears it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The request took effect and was answered: a write stored its body, a
    /// delete removed the object (or found none to remove, unconditionally),
    /// a read returned a version.
    Applied,
    /// The request took effect, but its reply was dropped: the client sees
    /// a broken connection, or no answer at all.
    DroppedAfterApply,
    /// The request took effect, and was answered with an error anyway
    /// (`500 InternalError`): the client must not take the error as "not
    /// applied".
    AppliedThenFailed {
        /// The HTTP status sent.
        status: u16,
    },
    /// Nothing changed; the server answered `status` with S3 error `code`
    /// (`NotModified` for a 304), or dropped that answer when
    /// `reply_dropped`.
    Refused {
        /// The HTTP status.
        status: u16,
        /// The S3 error code.
        code: &'static str,
        /// Whether the answer was dropped.
        reply_dropped: bool,
    },
}

impl Outcome {
    /// Whether the request changed (or, for a read, observed) the store.
    pub fn applied(&self) -> bool {
        matches!(self, Outcome::Applied | Outcome::DroppedAfterApply | Outcome::AppliedThenFailed { .. })
    }
}

/// One object request, reported to the observer when it ends.
///
/// Times are on the server's [`Clock`]: `applied_at` is the instant the
/// store was read or changed, the request's linearization point in an
/// honest store. Requests that cannot be routed to an object (bucket
/// operations, malformed paths, unsupported methods) are not reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The `x-amz-request-id` the response carries.
    pub request_id: String,
    /// Read, write or delete.
    pub op: OpKind,
    /// The bucket.
    pub bucket: String,
    /// The object key.
    pub key: String,
    /// The `If-Match` header as received, before the provider mode had its
    /// way with it.
    pub if_match: Option<String>,
    /// The `If-None-Match` header as received.
    pub if_none_match: Option<String>,
    /// What happened.
    pub outcome: Outcome,
    /// The ETag written (write), returned (read) or removed (delete), when
    /// the request was applied.
    pub etag: Option<String>,
    /// The body written (write) or returned (read), when the request was
    /// applied: the simulator reads the lease generation from it.
    pub body: Option<Bytes>,
    /// Who sent it: the `sim-client` header the simulator's transport adds
    /// (`node#incarnation`), absent for other clients.
    pub client: Option<String>,
    /// When the request reached the front end.
    pub started: Instant,
    /// When it read or changed the store, if it did.
    pub applied_at: Option<Instant>,
    /// When it was answered or its connection dropped.
    pub ended: Instant,
}

/// Receives one [`Event`] per object request. It runs on the request's
/// task, so it must be quick; forward to a channel for anything slow.
pub type Observer = Arc<dyn Fn(&Event) + Send + Sync>;
