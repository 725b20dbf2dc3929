//! RFC 3339 timestamps for the record's informational `expires_at` field.
//!
//! A few dozen lines of civil-calendar arithmetic are cheaper than a date
//! library dependency, and the library needs only UTC output and a lenient
//! parser for the timestamps the Go tools write (nanoseconds, any offset).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Formats `time` as `YYYY-MM-DDTHH:MM:SS.mmmZ`. Times before 1970 print as
/// the epoch; the library never writes such times.
pub fn format(time: SystemTime) -> String {
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
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(err());
    }
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
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    let secs = u64::try_from(secs).map_err(|_| err())?;
    Ok(UNIX_EPOCH + Duration::new(secs, nanos as u32))
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
