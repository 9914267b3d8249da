//! A small block-style YAML emitter with the formatting rules Omni's Go tooling produces.
//!
//! Two callers need byte-stable output: the operator's rendered template (2-space indentation,
//! hashed into status) and inline patch content re-encoded before it is sent to Omni (4-space
//! indentation, compared with what Omni stores). Generic serializers do not let us pin quoting,
//! indentation and key order, so the emitter is written here against an explicit node tree.

use std::fmt::Write as _;

/// One YAML node. Mappings keep the order they are built in; callers sort generic maps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    /// Converts a JSON-like value into a node; object keys are sorted by byte order so the output
    /// does not depend on how the value was built.
    pub(crate) fn from_json(value: &serde_json::Value) -> Node {
        match value {
            serde_json::Value::Null => Node::Null,
            serde_json::Value::Bool(b) => Node::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Node::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Node::UInt(u)
                } else {
                    Node::Float(n.as_f64().unwrap_or(0.0))
                }
            }
            serde_json::Value::String(s) => Node::Str(s.clone()),
            serde_json::Value::Array(items) => {
                Node::Seq(items.iter().map(Node::from_json).collect())
            }
            serde_json::Value::Object(map) => {
                let mut entries: Vec<(String, Node)> = map
                    .iter()
                    .map(|(k, v)| (k.clone(), Node::from_json(v)))
                    .collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Node::Map(entries)
            }
        }
    }

    /// A mapping from string pairs, sorted by key.
    pub(crate) fn string_map<'a>(map: impl IntoIterator<Item = (&'a String, &'a String)>) -> Node {
        let mut entries: Vec<(String, Node)> = map
            .into_iter()
            .map(|(k, v)| (k.clone(), Node::Str(v.clone())))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Node::Map(entries)
    }

    /// A sequence of strings.
    pub(crate) fn string_seq(items: &[String]) -> Node {
        Node::Seq(items.iter().cloned().map(Node::Str).collect())
    }
}

/// Emits one document (without separator) with `indent` spaces per nesting level.
pub(crate) fn emit_document(node: &Node, indent: usize) -> String {
    let mut out = String::new();
    let e = Emitter { indent };
    match node {
        Node::Map(entries) if !entries.is_empty() => e.map(&mut out, entries, 0, false),
        Node::Seq(items) if !items.is_empty() => e.seq(&mut out, items, 0, false),
        other => {
            e.inline_value(&mut out, other, 0);
            out.push('\n');
        }
    }
    out
}

/// Emits documents separated by `---` lines, each ending with a newline.
pub(crate) fn emit_documents(nodes: &[Node], indent: usize) -> String {
    let mut out = String::new();
    for (i, node) in nodes.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&emit_document(node, indent));
    }
    out
}

struct Emitter {
    indent: usize,
}

fn pad(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

impl Emitter {
    /// Writes a block mapping whose keys sit at column `col`. When `inline_first` is set the
    /// cursor is already positioned after a `- ` and the first key continues that line.
    fn map(&self, out: &mut String, entries: &[(String, Node)], col: usize, inline_first: bool) {
        for (i, (key, value)) in entries.iter().enumerate() {
            if i > 0 || !inline_first {
                pad(out, col);
            }
            if simple_key(key) {
                out.push_str(&scalar_text(key, true));
            } else {
                // An explicit `? key` line, then `:` at the key's column, as libyaml (Go's
                // encoder) writes it: YAML readers refuse implicit keys over 1024 characters.
                out.push_str("? ");
                out.push_str(&scalar_text(key, true));
                out.push('\n');
                pad(out, col);
            }
            out.push(':');
            self.after_key(out, value, col);
        }
    }

    fn seq(&self, out: &mut String, items: &[Node], col: usize, inline_first: bool) {
        for (i, item) in items.iter().enumerate() {
            if i > 0 || !inline_first {
                pad(out, col);
            }
            out.push('-');
            match item {
                Node::Map(entries) if !entries.is_empty() => {
                    out.push(' ');
                    self.map(out, entries, col + 2, true);
                }
                Node::Seq(inner) if !inner.is_empty() => {
                    out.push(' ');
                    self.seq(out, inner, col + 2, true);
                }
                other => {
                    out.push(' ');
                    self.inline_value(out, other, col + 2);
                    out.push('\n');
                }
            }
        }
    }

    /// Writes what follows `key:` for a value of a mapping whose keys are at `col`.
    fn after_key(&self, out: &mut String, value: &Node, col: usize) {
        match value {
            Node::Map(entries) if !entries.is_empty() => {
                out.push('\n');
                self.map(out, entries, col + self.indent, false);
            }
            Node::Seq(items) if !items.is_empty() => {
                out.push('\n');
                self.seq(out, items, col + self.indent, false);
            }
            other => {
                out.push(' ');
                self.inline_value(out, other, col + self.indent);
                out.push('\n');
            }
        }
    }

    /// Writes a scalar or an empty collection on the current line. `block_col` is the column
    /// used for the body of a literal block scalar.
    fn inline_value(&self, out: &mut String, node: &Node, block_col: usize) {
        match node {
            Node::Null => out.push_str("null"),
            Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Node::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Node::UInt(u) => {
                let _ = write!(out, "{u}");
            }
            Node::Float(f) => out.push_str(&float_text(*f)),
            Node::Str(s) => {
                if s.contains('\n') && literal_allowed(s) {
                    literal_block(out, s, block_col);
                } else {
                    out.push_str(&scalar_text(s, false));
                }
            }
            Node::Seq(_) => out.push_str("[]"),
            Node::Map(_) => out.push_str("{}"),
        }
    }
}

/// Whether a key may be written implicitly (`key: value`): libyaml's rule, at most 128 bytes
/// and on one line.
fn simple_key(key: &str) -> bool {
    key.len() <= 128 && !key.contains('\n')
}

/// Writes `|`, `|-` or `|+` and the indented lines; the caller appends the final newline.
fn literal_block(out: &mut String, s: &str, col: usize) {
    let body = s.trim_end_matches('\n');
    let trailing = s.len() - body.len();
    out.push('|');
    match trailing {
        0 => out.push('-'),
        1 => {}
        _ => out.push('+'),
    }
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            pad(out, col);
            out.push_str(line);
        }
    }
    // Keep-chomping needs the extra empty lines spelled out.
    for _ in 1..trailing {
        out.push('\n');
    }
}

/// Literal blocks cannot carry leading spaces on the first line (no indentation indicator is
/// written), trailing spaces or non-printable characters; those strings are double-quoted.
fn literal_allowed(s: &str) -> bool {
    !s.starts_with(' ')
        && !s.starts_with('\n')
        && s.split('\n')
            .all(|line| !line.ends_with(' ') && !line.ends_with('\t'))
        && s.chars().all(|c| c == '\n' || c == '\t' || is_printable(c))
}

fn float_text(f: f64) -> String {
    if f.is_nan() {
        ".nan".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { ".inf" } else { "-.inf" }.to_string()
    } else if f.fract() == 0.0 && f.abs() < 1e15 {
        // Integral floats print as integers, as Go's shortest formatting does.
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
}

/// The text of a string scalar with the quoting Go's YAML encoder picks.
pub(crate) fn scalar_text(s: &str, is_key: bool) -> String {
    match scalar_style(s, is_key) {
        Style::Plain => s.to_string(),
        Style::Single => format!("'{}'", s.replace('\'', "''")),
        Style::Double => double_quoted(s),
    }
}

fn scalar_style(s: &str, _is_key: bool) -> Style {
    if s.is_empty() || s.contains('\n') {
        return Style::Double;
    }
    let structural_plain = plain_allowed(s);
    let single_ok = single_allowed(s);
    if is_old_bool(s) || is_base60_float(s) || s == "<<" {
        return if single_ok {
            Style::Single
        } else {
            Style::Double
        };
    }
    if resolves_to_non_string(s) {
        return Style::Double;
    }
    if structural_plain {
        Style::Plain
    } else if single_ok {
        Style::Single
    } else {
        Style::Double
    }
}

fn is_printable(c: char) -> bool {
    matches!(c, '\u{20}'..='\u{7E}' | '\u{85}' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
        && c != '\u{FEFF}'
}

fn single_allowed(s: &str) -> bool {
    s.chars().all(is_printable)
}

/// Structural check of a plain scalar in block context (libyaml's analysis).
fn plain_allowed(s: &str) -> bool {
    if !s.chars().all(is_printable) {
        return false;
    }
    if s.starts_with(' ') || s.ends_with(' ') {
        return false;
    }
    if s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    let mut chars = s.chars();
    let first = chars.next().unwrap_or(' ');
    let second = chars.next();
    if matches!(
        first,
        '#' | ','
            | '['
            | ']'
            | '{'
            | '}'
            | '&'
            | '*'
            | '!'
            | '|'
            | '>'
            | '\''
            | '"'
            | '%'
            | '@'
            | '`'
    ) {
        return false;
    }
    if matches!(first, '?' | ':' | '-') && matches!(second, None | Some(' ')) {
        return false;
    }
    if s.contains(": ") || s.ends_with(':') || s.contains(" #") {
        return false;
    }
    true
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if is_printable(c) => out.push(c),
            c if (c as u32) <= 0xFF => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c if (c as u32) <= 0xFFFF => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08X}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// YAML 1.1 booleans that YAML 1.2 readers take as strings; quoted for old readers.
fn is_old_bool(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "on"
            | "On"
            | "ON"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "off"
            | "Off"
            | "OFF"
    )
}

/// YAML 1.1 sexagesimal numbers such as `1:20` or `190:20:30.15`.
fn is_base60_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (int_part, _frac) = match body.split_once('.') {
        Some((a, b)) if b.chars().all(|c| c.is_ascii_digit() || c == '_') => (a, Some(b)),
        Some(_) => return false,
        None => (body, None),
    };
    let mut groups = int_part.split(':');
    let Some(head) = groups.next() else {
        return false;
    };
    let mut head_chars = head.chars();
    if !head_chars.next().is_some_and(|c| c.is_ascii_digit())
        || !head_chars.all(|c| c.is_ascii_digit() || c == '_')
    {
        return false;
    }
    let mut count = 0;
    for g in groups {
        count += 1;
        let ok = match g.len() {
            1 => g.chars().all(|c| c.is_ascii_digit()),
            2 => {
                let b = g.as_bytes();
                (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit()
            }
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    count > 0
}

/// Whether a plain scalar would be read back as something other than a string.
fn resolves_to_non_string(s: &str) -> bool {
    if matches!(
        s,
        "~" | "null"
            | "Null"
            | "NULL"
            | "true"
            | "True"
            | "TRUE"
            | "false"
            | "False"
            | "FALSE"
            | ".inf"
            | ".Inf"
            | ".INF"
            | "+.inf"
            | "+.Inf"
            | "+.INF"
            | "-.inf"
            | "-.Inf"
            | "-.INF"
            | ".nan"
            | ".NaN"
            | ".NAN"
    ) {
        return true;
    }
    let first = s.chars().next().unwrap_or(' ');
    if !(first.is_ascii_digit() || matches!(first, '+' | '-' | '.')) {
        return false;
    }
    is_int(s) || is_float(s) || is_timestamp(s)
}

fn digits_with_underscores(s: &str, radix: u32) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.chars().all(|c| c == '_' || c.is_digit(radix))
}

fn is_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = body.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        return digits_with_underscores(hex.trim_start_matches('_'), 16);
    }
    if let Some(oct) = lower.strip_prefix("0o") {
        return digits_with_underscores(oct.trim_start_matches('_'), 8);
    }
    if let Some(bin) = lower.strip_prefix("0b") {
        return digits_with_underscores(bin.trim_start_matches('_'), 2);
    }
    if body.len() > 1 && body.starts_with('0') {
        return digits_with_underscores(&body[1..], 8);
    }
    digits_with_underscores(body, 10)
}

fn is_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    if let Some(exp) = exponent {
        let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
        if exp.is_empty() || !exp.chars().all(|c| c.is_ascii_digit()) {
            return false;
        }
    }
    let all_digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    match mantissa.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && all_digits(frac),
        Some((int, frac)) => !int.is_empty() && all_digits(int) && all_digits(frac),
        None => !mantissa.is_empty() && all_digits(mantissa),
    }
}

fn is_timestamp(s: &str) -> bool {
    let bytes = s.as_bytes();
    let take_digits = |from: usize, min: usize, max: usize| -> Option<usize> {
        let mut i = from;
        while i < bytes.len() && i - from < max && bytes[i].is_ascii_digit() {
            i += 1;
        }
        (i - from >= min).then_some(i)
    };
    let Some(i) = take_digits(0, 4, 4) else {
        return false;
    };
    if bytes.get(i) != Some(&b'-') {
        return false;
    }
    let Some(i) = take_digits(i + 1, 1, 2) else {
        return false;
    };
    if bytes.get(i) != Some(&b'-') {
        return false;
    }
    let Some(i) = take_digits(i + 1, 1, 2) else {
        return false;
    };
    if i == bytes.len() {
        return true;
    }
    // Date followed by a time: `T`, `t` or a space, then H:M:S; anything after is accepted
    // loosely because quoting a borderline string is harmless.
    if !matches!(bytes[i], b'T' | b't' | b' ') {
        return false;
    }
    let Some(j) = take_digits(i + 1, 1, 2) else {
        return false;
    };
    bytes.get(j) == Some(&b':')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: Vec<(&str, Node)>) -> Node {
        Node::Map(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }

    #[test]
    fn quoting_follows_yaml_1_1_ambiguity() {
        assert_eq!(scalar_text("n", true), "'n'");
        assert_eq!(scalar_text("yes", false), "'yes'");
        assert_eq!(scalar_text("1", false), "\"1\"");
        assert_eq!(scalar_text("262144", false), "\"262144\"");
        assert_eq!(scalar_text("1.5", false), "\"1.5\"");
        assert_eq!(scalar_text("0x1F", false), "\"0x1F\"");
        assert_eq!(scalar_text("true", false), "\"true\"");
        assert_eq!(scalar_text("null", false), "\"null\"");
        assert_eq!(scalar_text("", false), "\"\"");
        assert_eq!(scalar_text("2024-01-02", false), "\"2024-01-02\"");
        assert_eq!(scalar_text("1:20", false), "'1:20'");
        assert_eq!(scalar_text("v1.9.5", false), "v1.9.5");
        assert_eq!(scalar_text("192.168.0.1", false), "192.168.0.1");
        assert_eq!(scalar_text("∞", false), "∞");
        assert_eq!(scalar_text("unlimited", false), "unlimited");
        assert_eq!(scalar_text("a: b", false), "'a: b'");
        assert_eq!(scalar_text("- x", false), "'- x'");
        assert_eq!(scalar_text("*", false), "'*'");
        assert_eq!(scalar_text("it's", false), "it's");
        assert_eq!(scalar_text("#x", false), "'#x'");
        assert_eq!(scalar_text("tab\there", false), "\"tab\\there\"");
    }

    #[test]
    fn block_layout_with_two_and_four_spaces() {
        let doc = map(vec![
            ("kind", Node::Str("Cluster".into())),
            (
                "machines",
                Node::Seq(vec![Node::Str("a".into()), Node::Str("b".into())]),
            ),
            (
                "patches",
                Node::Seq(vec![map(vec![
                    ("name", Node::Str("p".into())),
                    (
                        "inline",
                        map(vec![("machine", map(vec![("x", Node::Int(1))]))]),
                    ),
                ])]),
            ),
            ("features", Node::Map(vec![])),
            ("list", Node::Seq(vec![])),
        ]);
        assert_eq!(
            emit_document(&doc, 2),
            "kind: Cluster\nmachines:\n  - a\n  - b\npatches:\n  - name: p\n    inline:\n      machine:\n        x: 1\nfeatures: {}\nlist: []\n"
        );
        assert_eq!(
            emit_document(&doc, 4),
            "kind: Cluster\nmachines:\n    - a\n    - b\npatches:\n    - name: p\n      inline:\n          machine:\n              x: 1\nfeatures: {}\nlist: []\n"
        );
    }

    #[test]
    fn multiline_strings_use_literal_blocks() {
        let doc = map(vec![("data", Node::Str("a: 1\nb: 2\n".into()))]);
        assert_eq!(emit_document(&doc, 2), "data: |\n  a: 1\n  b: 2\n");
        let doc = map(vec![("data", Node::Str("a\nb".into()))]);
        assert_eq!(emit_document(&doc, 2), "data: |-\n  a\n  b\n");
        let doc = map(vec![("data", Node::Str("a \nb".into()))]);
        assert_eq!(emit_document(&doc, 2), "data: \"a \\nb\"\n");
    }

    /// Found by `fuzz_input::render_output_parses_back_and_matches_its_hash`: an annotation key
    /// of 1,100 characters was written as an implicit key, which no YAML reader accepts.
    #[test]
    fn long_and_multiline_keys_are_written_as_explicit_keys() {
        let long = "k".repeat(1100);
        let doc = map(vec![
            (long.as_str(), Node::Str("v".into())),
            ("a\nb", map(vec![("c", Node::Int(1))])),
            ("short", Node::Int(2)),
        ]);
        let text = emit_document(&doc, 2);
        assert_eq!(
            text,
            format!("? {long}\n: v\n? \"a\\nb\"\n:\n  c: 1\nshort: 2\n")
        );
        let back: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(
            back,
            serde_json::json!({ long.as_str(): "v", "a\nb": {"c": 1}, "short": 2 })
        );
        let in_list = emit_document(&Node::Seq(vec![doc]), 2);
        let back: serde_json::Value = serde_saphyr::from_str(&in_list).unwrap();
        assert_eq!(back[0][long.as_str()], "v");
    }

    #[test]
    fn documents_are_separated() {
        let a = map(vec![("a", Node::Int(1))]);
        let b = map(vec![("b", Node::Bool(false))]);
        assert_eq!(emit_documents(&[a, b], 4), "a: 1\n---\nb: false\n");
    }

    #[test]
    fn json_objects_are_sorted() {
        let v = serde_json::json!({"b": 1, "a": {"d": "x", "c": [1, "2"]}});
        assert_eq!(
            emit_document(&Node::from_json(&v), 4),
            "a:\n    c:\n        - 1\n        - \"2\"\n    d: x\nb: 1\n"
        );
    }
}
