//! HTTP/1.1 message framing for the fault proxy: where a request or a reply
//! ends, what it says, and whether the connection ends after it.
//!
//! The proxy forwards the bytes it received unchanged, so framing only has
//! to find message boundaries ([RFC 9112 §6]) and decode bodies for the
//! record. [`parse`] works on whatever has been buffered so far and answers
//! "not yet" until a whole message is there; it re-reads the head on every
//! call, which costs little next to a socket read and keeps no state that
//! could go stale between reads.
//!
//! [RFC 9112 §6]: https://www.rfc-editor.org/rfc/rfc9112#section-6

use bytes::{Bytes, BytesMut};

/// The longest message head accepted. S3's heads are well under 4 KiB; a
/// peer that sends more without ending its head is not speaking HTTP.
pub(super) const MAX_HEAD_BYTES: usize = 64 << 10;

/// The largest body accepted. Lease records are a few hundred bytes; the
/// limit only keeps a broken peer from making the proxy buffer without end.
pub(super) const MAX_BODY_BYTES: usize = 64 << 20;

/// The most header fields in one head.
const MAX_HEADERS: usize = 100;

/// The longest chunk-size line or trailer line of a chunked body.
const MAX_LINE_BYTES: usize = 4096;

/// Which side sent the bytes being framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A request from the client.
    Request,
    /// A reply from the upstream; `to_head` when it answers a HEAD request,
    /// whose reply carries no body whatever its headers say.
    Response { to_head: bool },
}

/// One complete message, as framed from the front of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Message {
    /// The request's method, or empty for a reply.
    pub method: String,
    /// The request target as sent, or empty for a reply.
    pub target: String,
    /// A reply's final status (interim 1xx replies are folded into the
    /// message that follows them), or 0 for a request.
    pub status: u16,
    /// Header fields in order, names lower-cased, values read as UTF-8
    /// with invalid bytes replaced.
    pub headers: Vec<(String, String)>,
    /// The message exactly as received: what is forwarded.
    pub raw: Bytes,
    /// Where the final head ends in `raw` (and the body's bytes begin).
    pub head_len: usize,
    /// The body with any chunked coding removed: what is recorded.
    pub body: Bytes,
    /// Whether the connection ends after this message (`Connection: close`,
    /// HTTP/1.0 without keep-alive, or a reply delimited by the close).
    pub close: bool,
}

impl Message {
    /// Whether the message carries body bytes on the wire.
    pub(super) fn has_body(&self) -> bool {
        self.raw.len() > self.head_len
    }
}

/// Why bytes are not HTTP/1.1 the proxy can frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Malformed(pub &'static str);

/// How a body is delimited.
enum Framing {
    None,
    Length(usize),
    Chunked,
    UntilClose,
}

/// One parsed head.
struct Head {
    method: String,
    target: String,
    status: u16,
    headers: Vec<(String, String)>,
    len: usize,
    http10: bool,
}

impl Head {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers.iter().filter(move |(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The comma-separated tokens of every field called `name`, lower-cased.
    fn tokens(&self, name: &str) -> Vec<String> {
        self.values(name).flat_map(|v| v.split(',')).map(|t| t.trim().to_ascii_lowercase()).collect()
    }

    fn wants_close(&self) -> bool {
        let connection = self.tokens("connection");
        connection.iter().any(|t| t == "close") || (self.http10 && !connection.iter().any(|t| t == "keep-alive"))
    }

    fn framing(&self, kind: Kind) -> Result<Framing, Malformed> {
        if let Kind::Response { to_head } = kind
            && (to_head || self.status < 200 || self.status == 204 || self.status == 304)
        {
            return Ok(Framing::None);
        }
        let codings = self.tokens("transfer-encoding");
        if let Some(last) = codings.last() {
            // RFC 9112 §6.3: chunked must be the final coding; a request
            // without it cannot be framed, a reply runs until the close.
            return match (last.as_str(), kind) {
                ("chunked", _) => Ok(Framing::Chunked),
                (_, Kind::Request) => Err(Malformed("transfer-encoding without chunked")),
                (_, Kind::Response { .. }) => Ok(Framing::UntilClose),
            };
        }
        let mut length = None;
        for value in self.values("content-length").flat_map(|v| v.split(',')) {
            let value = value.trim();
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Malformed("content-length is not a number"));
            }
            let n: usize = value.parse().map_err(|_| Malformed("content-length too large"))?;
            if length.is_some_and(|l| l != n) {
                return Err(Malformed("conflicting content-length"));
            }
            length = Some(n);
        }
        match (length, kind) {
            (Some(n), _) if n > MAX_BODY_BYTES => Err(Malformed("body too large")),
            (Some(n), _) => Ok(Framing::Length(n)),
            (None, Kind::Request) => Ok(Framing::None),
            (None, Kind::Response { .. }) => Ok(Framing::UntilClose),
        }
    }
}

/// Frames one message from the front of `buf`.
///
/// `Ok(None)` means more bytes are needed; `eof` says none will come, which
/// completes a reply delimited by the close (and nothing else). On success
/// the message's bytes are split off the front of `buf`.
pub(super) fn parse(buf: &mut BytesMut, kind: Kind, eof: bool) -> Result<Option<Message>, Malformed> {
    let mut start = 0;
    loop {
        let Some(head) = parse_head(&buf[start..], kind)? else { return Ok(None) };
        let body_start = start + head.len;
        // An interim reply (100 Continue, 103 Early Hints) precedes the
        // final one to the same request: keep it with the final one, so the
        // client gets both and the record pairs the request with its answer.
        if matches!(kind, Kind::Response { .. }) && (100..200).contains(&head.status) && head.status != 101 {
            start = body_start;
            continue;
        }
        let close = head.wants_close();
        let (end, body, close) = match head.framing(kind)? {
            Framing::None => (body_start, Bytes::new(), close),
            Framing::Length(n) => {
                let end = body_start.checked_add(n).ok_or(Malformed("body too large"))?;
                if buf.len() < end {
                    return Ok(None);
                }
                (end, Bytes::copy_from_slice(&buf[body_start..end]), close)
            }
            Framing::Chunked => match chunked(&buf[body_start..])? {
                None => return Ok(None),
                Some((len, body)) => (body_start + len, body, close),
            },
            Framing::UntilClose => {
                if buf.len() - body_start > MAX_BODY_BYTES {
                    return Err(Malformed("body too large"));
                }
                if !eof {
                    return Ok(None);
                }
                (buf.len(), Bytes::copy_from_slice(&buf[body_start..]), true)
            }
        };
        let raw = buf.split_to(end).freeze();
        return Ok(Some(Message {
            method: head.method,
            target: head.target,
            status: head.status,
            headers: head.headers,
            raw,
            head_len: body_start,
            body,
            close,
        }));
    }
}

fn parse_head(buf: &[u8], kind: Kind) -> Result<Option<Head>, Malformed> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let (status, method, target, status_code, version) = match kind {
        Kind::Request => {
            let mut req = httparse::Request::new(&mut fields);
            let status = req.parse(buf).map_err(|_| Malformed("bad request head"))?;
            let method = req.method.unwrap_or_default().to_owned();
            let target = req.path.unwrap_or_default().to_owned();
            (status, method, target, 0, req.version.unwrap_or(1))
        }
        Kind::Response { .. } => {
            let mut res = httparse::Response::new(&mut fields);
            let status = res.parse(buf).map_err(|_| Malformed("bad reply head"))?;
            (status, String::new(), String::new(), res.code.unwrap_or(0), res.version.unwrap_or(1))
        }
    };
    let len = match status {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial if buf.len() > MAX_HEAD_BYTES => return Err(Malformed("head too long")),
        httparse::Status::Partial => return Ok(None),
    };
    let headers = fields
        .iter()
        .take_while(|f| !f.name.is_empty())
        .map(|f| (f.name.to_ascii_lowercase(), String::from_utf8_lossy(f.value).into_owned()))
        .collect();
    Ok(Some(Head { method, target, status: status_code, headers, len, http10: version == 0 }))
}

/// Frames a chunked body at the front of `buf`: its length on the wire and
/// its decoded bytes, or `None` while it is incomplete.
fn chunked(buf: &[u8]) -> Result<Option<(usize, Bytes)>, Malformed> {
    let mut pos = 0;
    let mut pieces = Vec::new();
    let mut total = 0usize;
    loop {
        let Some(size_line) = line(buf, pos)? else { return Ok(None) };
        let size_text = size_line.split(|&b| b == b';').next().unwrap_or_default();
        let size_text = std::str::from_utf8(size_text).map_err(|_| Malformed("bad chunk size"))?.trim();
        if size_text.is_empty() || size_text.len() > 16 {
            return Err(Malformed("bad chunk size"));
        }
        let size = u64::from_str_radix(size_text, 16).map_err(|_| Malformed("bad chunk size"))?;
        let size = usize::try_from(size).map_err(|_| Malformed("chunk too large"))?;
        pos += size_line.len() + 2;
        if size == 0 {
            // Trailer fields, then the empty line that ends the body.
            loop {
                let Some(trailer) = line(buf, pos)? else { return Ok(None) };
                pos += trailer.len() + 2;
                if trailer.is_empty() {
                    let mut body = BytesMut::with_capacity(total);
                    for (at, len) in pieces {
                        body.extend_from_slice(&buf[at..at + len]);
                    }
                    return Ok(Some((pos, body.freeze())));
                }
            }
        }
        total = total.checked_add(size).filter(|&t| t <= MAX_BODY_BYTES).ok_or(Malformed("body too large"))?;
        let data_end = pos + size;
        if buf.len() < data_end + 2 {
            return Ok(None);
        }
        if &buf[data_end..data_end + 2] != b"\r\n" {
            return Err(Malformed("chunk not followed by CRLF"));
        }
        pieces.push((pos, size));
        pos = data_end + 2;
    }
}

/// The line starting at `pos`, without its CRLF, or `None` while its end
/// has not arrived.
fn line(buf: &[u8], pos: usize) -> Result<Option<&[u8]>, Malformed> {
    let rest = buf.get(pos..).unwrap_or_default();
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(end) if end > MAX_LINE_BYTES => Err(Malformed("chunk line too long")),
        Some(end) => Ok(Some(&rest[..end])),
        None if rest.len() > MAX_LINE_BYTES => Err(Malformed("chunk line too long")),
        None => Ok(None),
    }
}
