//! The S3 XML error body, and the HTTP dates S3 puts in `Date` headers.
//!
//! Only the few elements the backend acts on are read, with a small scanner
//! rather than an XML library: S3 error bodies are flat and machine-written.

use std::time::SystemTime;

use crate::rfc3339::{Civil, push_number};

/// The parts of an S3 `<Error>` body the backend uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Error {
    /// `<Code>`, e.g. `PreconditionFailed`.
    pub code: String,
    /// `<Message>`.
    pub message: String,
    /// `<RequestId>`, for the provider's support.
    pub request_id: String,
}

impl S3Error {
    /// Parses an error body. Anything that is not an S3 error yields empty
    /// fields rather than an error: the status code still says enough.
    pub fn parse(body: &[u8]) -> S3Error {
        let text = String::from_utf8_lossy(body);
        S3Error {
            code: element(&text, "Code").unwrap_or_default(),
            message: element(&text, "Message").unwrap_or_default(),
            request_id: element(&text, "RequestId").unwrap_or_default(),
        }
    }
}

/// The text of the first `<name>...</name>` element, unescaped.
pub fn element(text: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find(&close)?;
    Some(unescape(&text[start..end]))
}

/// Escapes text for an XML element.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form S3
/// uses in `Date` headers.
pub fn parse_http_date(text: &str) -> Option<SystemTime> {
    let mut parts = text.split_whitespace();
    let _weekday = parts.next()?;
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: u64 = parts.next()?.parse().ok()?;
    let time = parts.next()?;
    if parts.next()? != "GMT" {
        return None;
    }
    // Written out for the RFC 3339 parser, which checks every field.
    let mut stamp = String::with_capacity(20 + time.len());
    push_number(&mut stamp, year, 4);
    stamp.push('-');
    push_number(&mut stamp, month, 2);
    stamp.push('-');
    push_number(&mut stamp, day, 2);
    stamp.push('T');
    stamp.push_str(time);
    stamp.push('Z');
    crate::rfc3339::parse(&stamp).ok()
}

/// Formats an IMF-fixdate, as S3 servers do.
pub fn format_http_date(time: SystemTime) -> String {
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let civil = Civil::of(time);
    let mut out = String::with_capacity(29);
    out.push_str(WEEKDAYS[(civil.days % 7) as usize]);
    out.push_str(", ");
    push_number(&mut out, civil.day, 2);
    out.push(' ');
    out.push_str(MONTHS[usize::try_from(civil.month.clamp(1, 12) - 1).unwrap_or_default()]);
    out.push(' ');
    push_number(&mut out, civil.year, 4);
    out.push(' ');
    civil.push_clock(&mut out);
    out.push_str(" GMT");
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn parses_an_s3_error_body() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message><Condition>If-Match</Condition><RequestId>R&amp;1</RequestId></Error>"#;
        let error = S3Error::parse(body);
        assert_eq!(error.code, "PreconditionFailed");
        assert!(error.message.starts_with("At least one"));
        assert_eq!(error.request_id, "R&1");
        assert_eq!(S3Error::parse(b"\xff not xml <Code>"), S3Error::default());
    }

    #[test]
    fn http_dates_round_trip() {
        let time = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(time, UNIX_EPOCH + Duration::from_secs(784_111_777));
        assert_eq!(format_http_date(time), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse_http_date("yesterday"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
        assert_eq!(parse_http_date("Sun, 31 Nov 1994 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49 GMT"), None);
    }

    proptest::proptest! {
        // Every whole second from 1970 to the end of 9999 (the weekday, the
        // day, month and year, and the time of day all come back).
        #[test]
        fn every_http_date_round_trips(secs in 0_u64..253_402_300_800) {
            let time = UNIX_EPOCH + Duration::from_secs(secs);
            let text = format_http_date(time);
            proptest::prop_assert_eq!(text.len(), 29);
            proptest::prop_assert_eq!(parse_http_date(&text), Some(time));
            proptest::prop_assert_eq!(&text[..3], ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(secs / 86_400 % 7) as usize]);
        }
    }

    #[test]
    fn escape_and_unescape_are_inverse() {
        let text = "a<b>&\"c'";
        assert_eq!(unescape(&escape(text)), text);
    }
}
