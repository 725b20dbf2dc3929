//! RFC 3339 timestamps for the record's informational `expires_at` field.
//!
//! A few dozen lines of civil-calendar arithmetic are cheaper than a date
//! library dependency, and the library needs only UTC output and a lenient
//! parser for the timestamps the Go tools write (nanoseconds, any offset).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Formats `time` as `YYYY-MM-DDTHH:MM:SS.mmmZ`. Times before 1970 print as
/// the epoch; the library never writes such times.
pub fn format(time: SystemTime) -> String {
    let civil = Civil::of(time);
    let mut out = String::with_capacity(24);
    push_number(&mut out, civil.year, 4);
    out.push('-');
    push_number(&mut out, civil.month, 2);
    out.push('-');
    push_number(&mut out, civil.day, 2);
    out.push('T');
    civil.push_clock(&mut out);
    out.push('.');
    push_number(&mut out, civil.millis, 3);
    out.push('Z');
    out
}

/// A UTC instant in the calendar fields the formatters here and the S3
/// dates write. Every timestamp the library writes goes through it, once
/// per request on the S3 path, so it is worked out by arithmetic and
/// written digit by digit rather than through `format!`.
pub(crate) struct Civil {
    /// The year, 1970 or later; past 9999 it has more than four digits.
    pub(crate) year: u64,
    pub(crate) month: u64,
    pub(crate) day: u64,
    pub(crate) hour: u64,
    pub(crate) minute: u64,
    pub(crate) second: u64,
    pub(crate) millis: u64,
    /// Whole days since 1970-01-01, a Thursday.
    pub(crate) days: u64,
}

impl Civil {
    /// The fields of `time` in UTC; times before 1970 are the epoch's.
    pub(crate) fn of(time: SystemTime) -> Civil {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        // At most 2^64 / 86,400 days, so the day count fits an i64 and the
        // year, month and day that come back are positive.
        let (year, month, day) = civil_from_days(i64::try_from(days).unwrap_or(i64::MAX));
        let positive = |value: i64| u64::try_from(value).unwrap_or_default();
        Civil {
            year: positive(year),
            month: positive(month),
            day: positive(day),
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
            millis: u64::from(since.subsec_millis()),
            days,
        }
    }

    /// Appends `HH:MM:SS`.
    pub(crate) fn push_clock(&self, out: &mut String) {
        push_number(out, self.hour, 2);
        out.push(':');
        push_number(out, self.minute, 2);
        out.push(':');
        push_number(out, self.second, 2);
    }
}

/// Appends `value` in decimal, with leading zeros up to `width` digits, as
/// `{value:0width$}` would.
pub(crate) fn push_number(out: &mut String, value: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    // A width past the twenty digits of any u64 is zeros before them all.
    for _ in digits.len()..width {
        out.push('0');
    }
    start = start.min(digits.len().saturating_sub(width));
    for &digit in &digits[start..] {
        out.push(char::from(digit));
    }
}

/// Why a timestamp did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 3339 timestamp: {0:?}")]
pub struct ParseError(pub String);

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
pub fn parse(text: &str) -> Result<SystemTime, ParseError> {
    let err = || ParseError(text.chars().take(64).collect());
    let bytes = text.as_bytes();
    if bytes.len() < 20 || !text.is_ascii() {
        return Err(err());
    }
    let num = |range: std::ops::Range<usize>| -> Result<i64, ParseError> {
        let part = &text[range];
        if part.bytes().all(|b| b.is_ascii_digit()) { part.parse().map_err(|_| err()) } else { Err(err()) }
    };
    let separators_ok = bytes[4] == b'-'
        && bytes[7] == b'-'
        && matches!(bytes[10], b'T' | b't' | b' ')
        && bytes[13] == b':'
        && bytes[16] == b':';
    if !separators_ok {
        return Err(err());
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let local_secs = epoch_secs(year, month, day, hour, minute, second).ok_or_else(err)?;
    let mut rest = &text[19..];
    let mut nanos: u64 = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err());
        }
        for (i, b) in fraction.bytes().take(digits).enumerate() {
            if i < 9 {
                nanos = nanos * 10 + u64::from(b - b'0');
            }
        }
        nanos *= 10u64.pow(9u32.saturating_sub(digits as u32));
        rest = &fraction[digits..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(&rest[..1], "+" | "-") && &rest[3..4] == ":" => {
            let hours = num(text.len() - 5..text.len() - 3)?;
            let minutes = num(text.len() - 2..text.len())?;
            if hours > 23 || minutes > 59 {
                return Err(err());
            }
            let magnitude = hours * 3600 + minutes * 60;
            if rest.starts_with('-') { -magnitude } else { magnitude }
        }
        _ => return Err(err()),
    };
    let secs = u64::try_from(local_secs - offset_secs).map_err(|_| err())?;
    Ok(UNIX_EPOCH + Duration::new(secs, nanos as u32))
}

/// Seconds since 1970-01-01T00:00:00 of a date and a time of day (negative
/// before it), or `None` when the fields name none: second 60 is allowed,
/// as RFC 3339 allows a leap second.
fn epoch_secs(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> Option<i64> {
    let valid = (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(year, month)
        && (0..=23).contains(&hour)
        && (0..=59).contains(&minute)
        && (0..=60).contains(&second);
    valid.then(|| days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// The UTC instant of a date and a time of day, or `None` when the fields
/// name none (see [`parse`] for which do) or it falls before 1970.
pub(crate) fn from_fields(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> Option<SystemTime> {
    let secs = epoch_secs(year, month, day, hour, minute, second)?;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's
// well-known algorithm, restated).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the formatters wrote through `format!` before they wrote digit
    /// by digit, kept as the reference they must still agree with.
    fn format_reference(time: SystemTime) -> String {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = civil_from_days(days as i64);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            since.subsec_millis()
        )
    }

    proptest! {
        // From 1970 to past the year 9999, where the year takes five digits.
        #[test]
        fn formats_as_format_did(secs in 0_u64..400_000_000_000, nanos in 0_u32..1_000_000_000) {
            let time = UNIX_EPOCH + Duration::new(secs, nanos);
            prop_assert_eq!(format(time), format_reference(time));
        }

        #[test]
        fn from_fields_agrees_with_parse(
            year in 1960_i64..10_000, month in 0_i64..14, day in 0_i64..33,
            hour in 0_i64..25, minute in 0_i64..61, second in 0_i64..62,
        ) {
            let text = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z");
            prop_assert_eq!(from_fields(year, month, day, hour, minute, second), parse(&text).ok());
        }

        #[test]
        fn pushes_numbers_as_format_pads_them(value in any::<u64>(), width in 0_usize..22) {
            let mut out = String::new();
            push_number(&mut out, value, width);
            prop_assert_eq!(out, format!("{value:0width$}"));
        }
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::new(1_709_251_199, 999_000_000);
        assert_eq!(format(t), "2024-02-29T23:59:59.999Z");
    }

    #[test]
    fn parses_offsets_and_fractions() {
        let t = parse("2024-02-29T23:59:59.999Z").unwrap();
        assert_eq!(t, UNIX_EPOCH + Duration::new(1_709_251_199, 999_000_000));
        let with_offset = parse("2024-03-01T01:59:59.999+02:00").unwrap();
        assert_eq!(with_offset, t);
        let nanos = parse("1970-01-01T00:00:00.123456789Z").unwrap();
        assert_eq!(nanos, UNIX_EPOCH + Duration::from_nanos(123_456_789));
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            "",
            "2024",
            "2024-13-01T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "ééééééééééééééééééééé",
            "1960-01-01T00:00:00Z",
            "2024-01-01T00:00:00+2:00",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn format_and_parse_round_trip() {
        for secs in [0u64, 951_782_400, 4_102_444_800, 253_402_300_799] {
            let t = UNIX_EPOCH + Duration::from_millis(secs * 1000 + 250);
            assert_eq!(parse(&format(t)).unwrap(), t);
        }
    }
}
