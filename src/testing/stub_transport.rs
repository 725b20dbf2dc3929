//! An [`HttpTransport`] that answers from a script, for testing how the S3
//! backend handles any reply a provider might send.
//!
//! ```
//! use bytes::Bytes;
//! use hoplock::testing::stub_transport::StubTransport;
//!
//! let stub = StubTransport::new(|request| {
//!     let status = if request.headers().contains_key("if-none-match") { 501 } else { 404 };
//!     Ok(http::Response::builder().status(status).body(Bytes::new()).unwrap())
//! });
//! assert_eq!(stub.requests().len(), 0);
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::s3::transport::{HttpTransport, ResponseFuture, TransportError};

type Script = dyn Fn(&http::Request<Bytes>) -> Result<http::Response<Bytes>, TransportError> + Send + Sync;

/// Answers every request through a closure and keeps every request sent.
#[derive(Clone)]
pub struct StubTransport {
    script: Arc<Script>,
    requests: Arc<Mutex<Vec<http::Request<Bytes>>>>,
}

impl StubTransport {
    /// A transport that answers with `script`.
    pub fn new(
        script: impl Fn(&http::Request<Bytes>) -> Result<http::Response<Bytes>, TransportError> + Send + Sync + 'static,
    ) -> StubTransport {
        StubTransport { script: Arc::new(script), requests: Arc::default() }
    }

    /// Every request sent so far, signed as they went out.
    pub fn requests(&self) -> Vec<http::Request<Bytes>> {
        self.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl fmt::Debug for StubTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StubTransport").finish_non_exhaustive()
    }
}

impl HttpTransport for StubTransport {
    fn send(&self, request: http::Request<Bytes>) -> ResponseFuture<'_> {
        let answer = (self.script)(&request);
        self.requests.lock().unwrap_or_else(|p| p.into_inner()).push(request);
        Box::pin(async move { answer })
    }
}
