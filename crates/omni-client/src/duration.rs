//! Go `time.ParseDuration` syntax (`90s`, `1h30m`, `1.5h`, `300ms`), so durations copied from
//! Omni and omnictl documentation work unchanged.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Empty or malformed input.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number without a unit (other than a bare `0`).
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// An unknown unit.
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit {
        /// The unit found.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// Negative durations are meaningless for TTLs and intervals.
    #[error("negative duration {0:?} is not allowed")]
    Negative(String),
    /// Larger than Go's maximum (about 2562047h).
    #[error("duration {0:?} is out of range")]
    Overflow(String),
}

/// Parses a Go duration string: a sequence of decimal numbers, each with an optional fraction
/// and a unit `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`, e.g. `1h30m`. A leading `+` is allowed;
/// `0` needs no unit.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_owned());
    let mut rest = input;
    if let Some(stripped) = rest.strip_prefix('-') {
        // "-0" is zero in Go; anything else negative is rejected.
        if stripped.chars().all(|c| c == '0' || c == '.') && !stripped.is_empty() {
            return Ok(Duration::ZERO);
        }
        return Err(DurationError::Negative(input.to_owned()));
    }
    if let Some(stripped) = rest.strip_prefix('+') {
        rest = stripped;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    // Go's limit is i64 nanoseconds.
    const MAX_NANOS: u128 = i64::MAX as u128;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => {
                let len = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(len)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_owned()));
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(DurationError::UnknownUnit {
                    unit: unit.to_owned(),
                    input: input.to_owned(),
                });
            }
        };
        let overflow = || DurationError::Overflow(input.to_owned());
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let mut value = whole.checked_mul(unit_nanos).ok_or_else(overflow)?;
        // Checked before the fraction is added, so that addition cannot overflow.
        if value > MAX_NANOS {
            return Err(overflow());
        }
        // Fractions: Go truncates toward zero at nanosecond precision.
        let mut scale = unit_nanos;
        for digit in frac_part.bytes().take(30) {
            scale /= 10;
            if scale == 0 {
                break;
            }
            value += u128::from(digit - b'0') * scale;
        }
        total = total.checked_add(value).ok_or_else(overflow)?;
        if total > MAX_NANOS {
            return Err(overflow());
        }
        rest = after;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| invalid())?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| invalid())?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole part just below u128's limit left no room for the fraction: adding it overflowed
    /// (a panic in debug builds, a wrapped value in release ones) instead of reporting a
    /// duration out of range.
    #[test]
    fn huge_whole_part_with_a_fraction_is_out_of_range() {
        let input = "340282366920938463463374607431768211.999us";
        assert_eq!(
            parse_go_duration(input),
            Err(DurationError::Overflow(input.to_string()))
        );
    }

    #[test]
    fn accepts_go_syntax() {
        let cases = [
            ("0", 0, 0),
            ("1h", 3600, 0),
            ("1h30m", 5400, 0),
            ("90s", 90, 0),
            ("1.5h", 5400, 0),
            ("300ms", 0, 300_000_000),
            ("2m3.5s", 123, 500_000_000),
            ("1us", 0, 1_000),
            ("1µs", 0, 1_000),
            ("+5s", 5, 0),
            ("87600h", 315_360_000, 0),
            (".5s", 0, 500_000_000),
        ];
        for (input, secs, nanos) in cases {
            assert_eq!(
                parse_go_duration(input),
                Ok(Duration::new(secs, nanos)),
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert!(matches!(
            parse_go_duration(""),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_go_duration("10"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_go_duration("1d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_go_duration("h"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_go_duration("1h "),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_go_duration("-1h"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_go_duration("9999999h"),
            Err(DurationError::Overflow(_))
        ));
    }
}
