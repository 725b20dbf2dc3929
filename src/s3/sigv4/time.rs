//! Signing times in SigV4's basic ISO 8601 form, without a date library.

use super::*;

/// A signing time as SigV4 writes it.
pub(super) struct AmzTime {
    /// `YYYYMMDD`, the date of the credential scope.
    pub(super) date: [u8; 8],
    /// `YYYYMMDDTHHMMSSZ`, the value of `x-amz-date`.
    pub(super) date_time: String,
}

impl AmzTime {
    pub(super) fn from_system_time(time: SystemTime) -> Result<Self, SignError> {
        // Sub-second precision is dropped: x-amz-date has none.
        let secs = time.duration_since(UNIX_EPOCH).map_err(|_| SignError::TimeOutOfRange)?.as_secs();
        // The calendar arithmetic lives in one place; this only reshapes
        // `YYYY-MM-DDTHH:MM:SS.mmmZ` into the basic `YYYYMMDDTHHMMSSZ`.
        let stamp = crate::rfc3339::format(UNIX_EPOCH + Duration::from_secs(secs));
        if stamp.len() != 24 {
            return Err(SignError::TimeOutOfRange); // a year past 9999
        }
        let date_time = format!(
            "{}{}{}T{}{}{}Z",
            &stamp[0..4],
            &stamp[5..7],
            &stamp[8..10],
            &stamp[11..13],
            &stamp[14..16],
            &stamp[17..19]
        );
        let mut date = [b'0'; 8];
        date.copy_from_slice(&date_time.as_bytes()[..8]);
        Ok(Self { date, date_time })
    }
}

/// Parses a basic ISO 8601 `YYYYMMDDTHHMMSSZ` into a time, checking every
/// field's range.
pub(super) fn parse_amz_date(value: &[u8]) -> Option<SystemTime> {
    // ASCII only, so the byte slicing below stays on character boundaries.
    if value.len() != 16 || !value.is_ascii() || value[8] != b'T' || value[15] != b'Z' {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?;
    // SigV4 has no leap seconds; RFC 3339 allows :60, so refuse it here.
    if &text[13..15] == "60" {
        return None;
    }
    let stamp = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &text[0..4],
        &text[4..6],
        &text[6..8],
        &text[9..11],
        &text[11..13],
        &text[13..15]
    );
    crate::rfc3339::parse(&stamp).ok()
}
