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

/// The terms of a field selector: `(label, value, negated)` for `=`, `==` and `!=`.
fn field_terms(selector: &str) -> impl Iterator<Item = Option<(&str, &str, bool)>> {
    selector
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|term| {
            if let Some((f, v)) = term.split_once("!=") {
                Some((f.trim(), v.trim(), true))
            } else {
                term.split_once("==")
                    .or_else(|| term.split_once('='))
                    .map(|(f, v)| (f.trim(), v.trim(), false))
            }
        })
}

/// 400 BadRequest, as on the real server, when the field selector of an Events request names
/// a label Events cannot be selected by (see [`crate::events::field_label`]). Other types keep
/// answering with no match, since kube-sim does not know their extra labels (e.g. a Pod's
/// `spec.nodeName`).
pub(crate) fn check_field_selector(
    q: &HashMap<String, String>,
    group: &str,
    resource: &str,
) -> Result<(), crate::error::ApiError> {
    let Some(selector) = q.get("fieldSelector") else {
        return Ok(());
    };
    let probe = Value::Object(serde_json::Map::new());
    for term in field_terms(selector) {
        let Some((label, _, _)) = term else {
            return Err(crate::error::ApiError::bad_request(&format!(
                "invalid field selector: {selector:?}"
            )));
        };
        if crate::events::has_field_labels(group, resource) {
            crate::events::field_label(group, resource, &probe, label)
                .map_err(|e| crate::error::ApiError::bad_request(&e.to_string()))?;
        }
    }
    Ok(())
}

/// Evaluates a field selector (`=`, `==`, `!=`) over the labels the resource supports:
/// `metadata.name` and `metadata.namespace` everywhere, plus each Events API's own labels; an
/// unset field compares as the empty string. Other labels never match, so callers notice
/// (requests are checked first by [`check_field_selector`]).
pub(crate) fn field_selector_matches(
    selector: &str,
    group: &str,
    resource: &str,
    obj: &Value,
) -> bool {
    field_terms(selector).all(|term| {
        let Some((label, value, negate)) = term else {
            return false;
        };
        match crate::events::field_label(group, resource, obj, label) {
            Ok(actual) => (actual.unwrap_or_default() == value) != negate,
            Err(_) => false,
        }
    })
}

/// Whether `obj` (of `group`/`resource`) passes the request's label and field selectors.
pub(crate) fn selected(
    q: &HashMap<String, String>,
    group: &str,
    resource: &str,
    obj: &Value,
) -> bool {
    let empty = serde_json::Map::new();
    let labels = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    q.get("labelSelector")
        .is_none_or(|s| selector_matches(s, labels))
        && q.get("fieldSelector")
            .is_none_or(|s| field_selector_matches(s, group, resource, obj))
}
