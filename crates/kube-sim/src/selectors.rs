//! Label and field selectors for list and watch.

use std::collections::HashMap;

use serde_json::Value;

/// Splits a selector at top-level commas (commas inside `in (a,b)` stay).
pub(crate) fn selector_terms(selector: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in selector.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    terms.push(cur);
    terms
        .into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Evaluates a label selector: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k`.
pub(crate) fn selector_matches(selector: &str, labels: &serde_json::Map<String, Value>) -> bool {
    selector_terms(selector).iter().all(|term| {
        let term = term.as_str();
        let set = |rest: &str| -> Vec<String> {
            rest.trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .split(',')
                .map(|v| v.trim().to_string())
                .collect()
        };
        if let Some((k, rest)) = term.split_once(" notin ") {
            labels
                .get(k.trim())
                .and_then(Value::as_str)
                .is_none_or(|v| !set(rest).iter().any(|x| x == v))
        } else if let Some((k, rest)) = term.split_once(" in ") {
            labels
                .get(k.trim())
                .and_then(Value::as_str)
                .is_some_and(|v| set(rest).iter().any(|x| x == v))
        } else if let Some((k, v)) = term.split_once("!=") {
            labels.get(k.trim()).and_then(Value::as_str) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.get(k.trim()).and_then(Value::as_str) == Some(v.trim())
        } else if let Some(k) = term.strip_prefix('!') {
            !labels.contains_key(k.trim())
        } else {
            labels.contains_key(term)
        }
    })
}

/// Evaluates a field selector over `metadata.name` and `metadata.namespace`
/// (`=`, `==`, `!=`); other fields never match, so callers notice.
pub(crate) fn field_selector_matches(selector: &str, obj: &Value) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .all(|term| {
            let (field, value, negate) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, v, false)
            } else {
                return false;
            };
            let actual = match field.trim() {
                "metadata.name" => obj.pointer("/metadata/name"),
                "metadata.namespace" => obj.pointer("/metadata/namespace"),
                _ => return false,
            }
            .and_then(Value::as_str)
            .unwrap_or("");
            (actual == value.trim()) != negate
        })
}

/// Whether `obj` passes the request's label and field selectors.
pub(crate) fn selected(q: &HashMap<String, String>, obj: &Value) -> bool {
    let empty = serde_json::Map::new();
    let labels = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    q.get("labelSelector")
        .is_none_or(|s| selector_matches(s, labels))
        && q.get("fieldSelector")
            .is_none_or(|s| field_selector_matches(s, obj))
}
