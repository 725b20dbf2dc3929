//! Signing times in SigV4's basic ISO 8601 form, without a date library.

use super::*;
use crate::rfc3339::{Civil, push_number};

/// A signing time as SigV4 writes it.
pub(super) struct AmzTime {
    /// `YYYYMMDD`, the date of the credential scope.
    pub(super) date: [u8; 8],
    /// `YYYYMMDDTHHMMSSZ`, the value of `x-amz-date`.
    pub(super) date_time: String,
}

impl AmzTime {
    pub(super) fn from_system_time(time: SystemTime) -> Result<Self, SignError> {
        // Sub-second precision is dropped: x-amz-date has none. The
        // calendar arithmetic lives in one place (`rfc3339::Civil`).
        time.duration_since(UNIX_EPOCH).map_err(|_| SignError::TimeOutOfRange)?;
        let civil = Civil::of(time);
        if civil.year > 9999 {
            return Err(SignError::TimeOutOfRange);
        }
        let mut date_time = String::with_capacity(16);
        push_number(&mut date_time, civil.year, 4);
        push_number(&mut date_time, civil.month, 2);
        push_number(&mut date_time, civil.day, 2);
        date_time.push('T');
        push_number(&mut date_time, civil.hour, 2);
        push_number(&mut date_time, civil.minute, 2);
        push_number(&mut date_time, civil.second, 2);
        date_time.push('Z');
        let mut date = [b'0'; 8];
        date.copy_from_slice(&date_time.as_bytes()[..8]);
        Ok(Self { date, date_time })
    }
}

pub(super) fn parse_amz_date(value: &[u8]) -> Option<SystemTime> {
    if value.len() != 16 || value[8] != b'T' || value[15] != b'Z' {
        return None;
    }
    // SigV4 has no leap seconds; RFC 3339 allows :60, so refuse it here.
    if &value[13..15] == b"60" {
        return None;
    }
    // Each field is digits only, as RFC 3339 reads them.
    let field = |range: std::ops::Range<usize>| -> Option<i64> {
        value[range].iter().try_fold(0_i64, |number, &b| b.is_ascii_digit().then(|| number * 10 + i64::from(b - b'0')))
    };
    crate::rfc3339::from_fields(field(0..4)?, field(4..6)?, field(6..8)?, field(9..11)?, field(11..13)?, field(13..15)?)
}
