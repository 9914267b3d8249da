//! Go duration syntax (`300ms`, `90s`, `1h30m`, `1.5h`, `-5m`, `0`), the one parser of the
//! workspace: [`GoDuration`] reads exactly what Go's `time.ParseDuration` reads (errors worded
//! as Go's) and prints as Go's `Duration.String()` (the kubeconfig export's spec hash embeds
//! it). Template fields, CLI flags and the operator's CRD fields all parse with it, so a
//! duration copied from Omni or omnictl documentation means the same everywhere.
//!
//! [`DurationField`] is the type of a duration field in a document (cluster template, CRD
//! spec): the text as written and its parse, computed once when the field is decoded. With the
//! `schemars` feature it has the JSON schema of a plain string.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
/// Go accumulates magnitudes in uint64 and allows exactly 2^63 for negative values.
const LIMIT: u64 = 1 << 63;

/// Double-quotes a value the way Go's `%q` does for printable text (escaping quotes,
/// backslashes and control characters, keeping other Unicode such as `∞` as is).
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Parses a non-negative Go duration (TTLs, timeouts, flags); `-0` is zero.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let d = GoDuration::parse(input)?;
    d.to_std()
        .ok_or_else(|| DurationError::Negative(input.to_owned()))
}

/// A signed nanosecond duration with Go's range (about ±292 years).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration {
    nanos: i64,
}

/// Why a duration string was rejected; messages match Go's `time.ParseDuration`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Syntax error or overflow.
    #[error("time: invalid duration {}", quote(.0))]
    Invalid(String),
    /// A number without a unit, e.g. `10`.
    #[error("time: missing unit in duration {}", quote(.0))]
    MissingUnit(String),
    /// A unit Go does not know, e.g. `d`.
    #[error("time: unknown unit {} in duration {}", quote(.unit), quote(.input))]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// A negative duration where only non-negative ones make sense ([`parse_go_duration`]).
    #[error("negative duration {} is not allowed", quote(.0))]
    Negative(String),
}

impl GoDuration {
    /// The zero duration.
    pub(crate) const ZERO: GoDuration = GoDuration { nanos: 0 };

    /// A duration of `nanos` nanoseconds.
    pub const fn from_nanos(nanos: i64) -> Self {
        Self { nanos }
    }

    /// A duration of whole seconds (saturating at Go's range).
    pub const fn from_secs(secs: i64) -> Self {
        Self {
            nanos: secs.saturating_mul(SECOND as i64),
        }
    }

    /// Signed nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.nanos
    }

    /// True when strictly greater than zero.
    pub const fn is_positive(self) -> bool {
        self.nanos > 0
    }

    /// True when strictly less than zero.
    pub const fn is_negative(self) -> bool {
        self.nanos < 0
    }

    /// The duration as a `std::time::Duration`, or `None` when negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.nanos)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    /// Parses Go duration syntax: an optional sign, then one or more decimal numbers each
    /// followed by a unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`); a bare `0` is allowed.
    pub fn parse(input: &str) -> Result<Self, DurationError> {
        let invalid = || DurationError::Invalid(input.to_string());
        let mut s = input.as_bytes();
        let mut neg = false;
        if let Some(&c) = s.first()
            && (c == b'-' || c == b'+')
        {
            neg = c == b'-';
            s = &s[1..];
        }
        if s == b"0" {
            return Ok(Self::ZERO);
        }
        if s.is_empty() {
            return Err(invalid());
        }
        let mut total: u64 = 0;
        while !s.is_empty() {
            if !(s[0] == b'.' || s[0].is_ascii_digit()) {
                return Err(invalid());
            }
            let before = s.len();
            let (mut value, rest) = leading_int(s).ok_or_else(invalid)?;
            s = rest;
            let had_int = before != s.len();

            let mut fraction: u64 = 0;
            let mut scale: f64 = 1.0;
            let mut had_fraction = false;
            if s.first() == Some(&b'.') {
                s = &s[1..];
                let before = s.len();
                let (f, sc, rest) = leading_fraction(s);
                fraction = f;
                scale = sc;
                s = rest;
                had_fraction = before != s.len();
            }
            if !had_int && !had_fraction {
                return Err(invalid());
            }

            let unit_len = s
                .iter()
                .position(|&c| c == b'.' || c.is_ascii_digit())
                .unwrap_or(s.len());
            if unit_len == 0 {
                return Err(DurationError::MissingUnit(input.to_string()));
            }
            let unit_bytes = &s[..unit_len];
            s = &s[unit_len..];
            let unit = unit_nanos(unit_bytes).ok_or_else(|| DurationError::UnknownUnit {
                unit: String::from_utf8_lossy(unit_bytes).into_owned(),
                input: input.to_string(),
            })?;
            if value > LIMIT / unit {
                return Err(invalid());
            }
            value *= unit;
            if fraction > 0 {
                // Go uses float64 here too; it is exact to the nanosecond for every unit up to hours.
                value += (fraction as f64 * (unit as f64 / scale)) as u64;
                if value > LIMIT {
                    return Err(invalid());
                }
            }
            total = total.checked_add(value).ok_or_else(invalid)?;
            if total > LIMIT {
                return Err(invalid());
            }
        }
        if neg {
            // total ≤ 2^63, so the negation fits.
            return Ok(Self {
                nanos: (total as i128).wrapping_neg() as i64,
            });
        }
        i64::try_from(total)
            .map(|nanos| Self { nanos })
            .map_err(|_| invalid())
    }
}

fn unit_nanos(unit: &[u8]) -> Option<u64> {
    Some(match unit {
        b"ns" => NANOSECOND,
        b"us" => MICROSECOND,
        // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU, as Go accepts both.
        [0xC2, 0xB5, b's'] | [0xCE, 0xBC, b's'] => MICROSECOND,
        b"ms" => MILLISECOND,
        b"s" => SECOND,
        b"m" => MINUTE,
        b"h" => HOUR,
        _ => return None,
    })
}

/// Consumes leading ASCII digits; `None` on overflow past 2^63.
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > LIMIT {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// Consumes the digits after a decimal point; precision beyond 63 bits is dropped, as in Go.
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let mut x: u64 = 0;
    let mut scale = 1.0;
    let mut overflow = false;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        let digit = u64::from(s[i] - b'0');
        i += 1;
        if overflow {
            continue;
        }
        if x > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + digit;
        if y > LIMIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[i..])
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String()`: `1h30m0s`, `1m30s`, `1.5s`, `300ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.nanos < 0;
        let mut u = self.nanos.unsigned_abs();
        let mut out = String::new();
        if u < SECOND {
            let (unit, prec) = match u {
                0 => return f.write_str("0s"),
                u if u < MICROSECOND => ("ns", 0),
                u if u < MILLISECOND => ("µs", 3),
                _ => ("ms", 6),
            };
            let (frac, int) = format_fraction(u, prec);
            out.push_str(&int.to_string());
            out.push_str(&frac);
            out.push_str(unit);
        } else {
            let (frac, secs) = format_fraction(u, 9);
            u = secs;
            let s = u % 60;
            u /= 60;
            if u > 0 {
                let m = u % 60;
                u /= 60;
                if u > 0 {
                    out.push_str(&format!("{u}h"));
                }
                out.push_str(&format!("{m}m"));
            }
            out.push_str(&format!("{s}{frac}s"));
        }
        if neg {
            f.write_str("-")?;
        }
        f.write_str(&out)
    }
}

/// Splits `v` into `v / 10^prec` and its fractional digits (`.5`, `.25`, or empty when zero),
/// trailing zeros dropped as Go's `fmtFrac` does.
fn format_fraction(v: u64, prec: u32) -> (String, u64) {
    let divisor = 10u64.pow(prec);
    let int = v / divisor;
    let frac = v % divisor;
    if frac == 0 {
        return (String::new(), int);
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    (format!(".{}", digits.trim_end_matches('0')), int)
}

/// A Go duration field of a document: the text as written and its [`GoDuration::parse`],
/// computed once when the field is decoded.
///
/// Any string decodes, including one Go would reject: the validators (admission, the
/// controllers, template validation) then report it at its field path with the text as
/// written, as they would any other bad value, instead of the whole document failing to
/// decode. It serialises back to the text unchanged (`1.5h` stays `1.5h`, not `1h30m0s`), and
/// two fields are equal when their texts are.
#[derive(Debug, Clone)]
pub struct DurationField {
    text: String,
    duration: Result<GoDuration, DurationError>,
}

impl DurationField {
    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The parsed duration, or why Go's `time.ParseDuration` would reject the text.
    pub fn duration(&self) -> Result<GoDuration, &DurationError> {
        self.duration.as_ref().copied()
    }

    /// True when the text is empty, which template fields read as "not given".
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

impl Default for DurationField {
    /// The empty text, which is not a duration ([`Self::duration`] is an error).
    fn default() -> Self {
        Self::from(String::new())
    }
}

impl From<String> for DurationField {
    fn from(text: String) -> Self {
        let duration = GoDuration::parse(&text);
        Self { text, duration }
    }
}

impl From<&str> for DurationField {
    fn from(text: &str) -> Self {
        Self::from(text.to_owned())
    }
}

impl PartialEq for DurationField {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for DurationField {}

impl Hash for DurationField {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl fmt::Display for DurationField {
    /// The text as written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for DurationField {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for DurationField {
    /// Fails only where a `String` would (a value that is not a string).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

/// The schema of a plain string, as the field had before it was typed: the duration syntax is
/// checked by the validators, which word their errors as Go does, not by the schema.
#[cfg(feature = "schemars")]
impl schemars::JsonSchema for DurationField {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DurationField".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> i64 {
        match GoDuration::parse(s) {
            Ok(d) => d.as_nanos(),
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(p("0"), 0);
        assert_eq!(p("-0"), 0);
        assert_eq!(p("+0"), 0);
        assert_eq!(p("0s"), 0);
        assert_eq!(p("300ms"), 300_000_000);
        assert_eq!(p("90s"), 90 * SECOND as i64);
        assert_eq!(p("5m"), 5 * MINUTE as i64);
        assert_eq!(p("24h"), 24 * HOUR as i64);
        assert_eq!(p("1h30m"), (HOUR + 30 * MINUTE) as i64);
        assert_eq!(p("1.5h"), (HOUR + 30 * MINUTE) as i64);
        assert_eq!(p(".5s"), 500_000_000);
        assert_eq!(p("1.s"), SECOND as i64);
        assert_eq!(p("-1h"), -(HOUR as i64));
        assert_eq!(p("+2m"), 2 * MINUTE as i64);
        assert_eq!(p("1ns"), 1);
        assert_eq!(p("1us"), 1_000);
        assert_eq!(p("1µs"), 1_000);
        assert_eq!(p("1μs"), 1_000);
        assert_eq!(
            p("1h1m1s1ms1us1ns"),
            (HOUR + MINUTE + SECOND + MILLISECOND + MICROSECOND + 1) as i64
        );
        assert_eq!(p("0.3333333333333333333h"), 1_200_000_000_000);
        assert_eq!(p("9223372036854775807ns"), i64::MAX);
        assert_eq!(p("-9223372036854775808ns"), i64::MIN);
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert_eq!(
            GoDuration::parse(""),
            Err(DurationError::Invalid(String::new()))
        );
        assert_eq!(
            GoDuration::parse("10"),
            Err(DurationError::MissingUnit("10".into()))
        );
        assert_eq!(
            GoDuration::parse("1d"),
            Err(DurationError::UnknownUnit {
                unit: "d".into(),
                input: "1d".into()
            })
        );
        for bad in [
            "-",
            "+",
            ".",
            "s",
            "h1",
            "1h ",
            " 1h",
            "1.h.",
            "-.s",
            "9223372036854775808ns",
            "3000000h",
        ] {
            assert!(
                GoDuration::parse(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert_eq!(
            GoDuration::parse("1d").map_err(|e| e.to_string()),
            Err(r#"time: unknown unit "d" in duration "1d""#.to_string())
        );
        assert_eq!(
            GoDuration::parse("10").map_err(|e| e.to_string()),
            Err(r#"time: missing unit in duration "10""#.to_string())
        );
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            ("24h", "24h0m0s"),
            ("12h", "12h0m0s"),
            ("1h30m", "1h30m0s"),
            ("90s", "1m30s"),
            ("0", "0s"),
            ("1.5s", "1.5s"),
            ("300ms", "300ms"),
            ("1500us", "1.5ms"),
            ("1us", "1µs"),
            ("999ns", "999ns"),
            ("-5m", "-5m0s"),
            ("1h0m0.25s", "1h0m0.25s"),
            ("2562047h47m16.854775807s", "2562047h47m16.854775807s"),
        ];
        for (input, want) in cases {
            assert_eq!(
                GoDuration::parse(input).map(|d| d.to_string()),
                Ok(want.to_string()),
                "{input}"
            );
        }
        assert_eq!(
            GoDuration::from_nanos(i64::MIN).to_string(),
            "-2562047h47m16.854775808s"
        );
    }

    #[test]
    fn sign_helpers() {
        assert!(GoDuration::from_secs(1).is_positive());
        assert!(!GoDuration::ZERO.is_positive());
        assert!(GoDuration::from_secs(-1).is_negative());
        assert_eq!(GoDuration::from_secs(-1).to_std(), None);
        assert_eq!(
            GoDuration::from_secs(3).to_std(),
            Some(std::time::Duration::from_secs(3))
        );
    }

    #[test]
    fn non_negative_durations() {
        assert_eq!(parse_go_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_go_duration("-0"), Ok(Duration::ZERO));
        assert_eq!(
            parse_go_duration("-5m").map_err(|e| e.to_string()),
            Err(r#"negative duration "-5m" is not allowed"#.to_string())
        );
    }

    #[test]
    fn a_duration_field_decodes_any_string_and_parses_it_once() {
        let good: DurationField = serde_json::from_str(r#""1h30m""#).unwrap();
        assert_eq!(good.as_str(), "1h30m");
        assert_eq!(good.duration(), Ok(GoDuration::from_secs(5400)));
        let bad: DurationField =
            serde_json::from_str(r#""1d""#).expect("a value Go rejects still decodes");
        assert_eq!(bad.as_str(), "1d");
        assert_eq!(
            bad.duration().map_err(ToString::to_string),
            Err(r#"time: unknown unit "d" in duration "1d""#.to_string())
        );
        let empty = DurationField::default();
        assert!(empty.is_empty() && !good.is_empty());
        assert_eq!(
            empty.duration(),
            Err(&DurationError::Invalid(String::new()))
        );
        // What is not a string fails as it would for a `String` field.
        let err = serde_json::from_str::<DurationField>("90")
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected a string"), "{err}");
    }

    #[test]
    fn a_duration_field_serialises_the_text_as_written() {
        for text in ["1.5h", "90s", "0", "-5m", "1d", " 5m", ""] {
            let json = serde_json::to_string(text).unwrap();
            let field: DurationField = serde_json::from_str(&json).unwrap();
            assert_eq!(serde_json::to_string(&field).unwrap(), json);
            assert_eq!(field.to_string(), text);
            assert_eq!(field, DurationField::from(text.to_string()));
        }
    }

    #[test]
    fn duration_fields_compare_and_hash_by_text() {
        let (short, long) = (DurationField::from("90s"), DurationField::from("1m30s"));
        assert_eq!(short.duration(), long.duration());
        assert_ne!(short, long);
        let set: std::collections::HashSet<DurationField> =
            [short.clone(), long, short].into_iter().collect();
        assert_eq!(set.len(), 2);
    }

    /// A field typed `DurationField` has exactly the schema it had as a `String`, description,
    /// default and length bounds included, so the CRDs built from it do not change.
    #[cfg(feature = "schemars")]
    #[test]
    fn a_duration_field_has_the_schema_of_a_string() {
        use schemars::{JsonSchema, SchemaGenerator, json_schema};

        #[derive(JsonSchema, Serialize)]
        #[schemars(rename = "Fields")]
        #[serde(rename_all = "camelCase")]
        struct Typed {
            /// How often.
            #[serde(default = "every_five_minutes")]
            sync_interval: DurationField,
            /// How long, if set.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            timeout: Option<DurationField>,
            /// Never empty.
            #[schemars(length(min = 1))]
            interval: DurationField,
        }
        fn every_five_minutes() -> DurationField {
            "5m".into()
        }

        #[derive(JsonSchema, Serialize)]
        #[schemars(rename = "Fields")]
        #[serde(rename_all = "camelCase")]
        struct Plain {
            /// How often.
            #[serde(default = "five_minutes_text")]
            sync_interval: String,
            /// How long, if set.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            timeout: Option<String>,
            /// Never empty.
            #[schemars(length(min = 1))]
            interval: String,
        }
        fn five_minutes_text() -> String {
            "5m".into()
        }

        assert_eq!(
            SchemaGenerator::default().subschema_for::<DurationField>(),
            json_schema!({ "type": "string" })
        );
        assert_eq!(schemars::schema_for!(Typed), schemars::schema_for!(Plain));
    }
}
