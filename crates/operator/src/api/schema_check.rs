//! Offline evaluation of the constraints our CRD schemas hand to the API server (types,
//! required fields, enums, lengths, bounds, patterns, list sets, unknown fields and our CEL
//! rules), so `omni-operator validate` catches what `kubectl apply` would reject before the
//! admission webhook even runs.
//!
//! Only the schema features our CRDs use are implemented; patterns and CEL rules are matched
//! by their exact text, and a test fails if a CRD ever uses one this module does not know.

use serde_json::Value;

use super::common::MACHINE_SET_CEL_RULE;
use super::validation::{FieldError, quote};

/// CEL rule on `OmniCluster.spec.deletePolicy`.
pub(crate) const DELETE_POLICY_CEL_RULE: &str =
    "!(has(self.orphan) && self.orphan && has(self.destroyMachines) && self.destroyMachines)";

/// Every `pattern` this module can evaluate.
#[cfg(test)]
pub(crate) const KNOWN_PATTERNS: [&str; 4] = [
    "^(https?|grpc)://.+",
    r"^v[0-9]+\.[0-9]+\.[0-9]+$",
    "^[A-Za-z0-9_-]+$",
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
];

/// Checks a full object of `kind` against that kind's CRD schema. Unknown kinds yield no
/// errors (the caller reports them). `status` is not checked: users do not write it.
pub fn check(kind: &str, object: &Value) -> Vec<FieldError> {
    let Some(crd) = super::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
    else {
        return Vec::new();
    };
    let Some(schema) = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
    else {
        return Vec::new();
    };
    let Ok(schema) = serde_json::to_value(schema) else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    match object.get("spec") {
        None | Some(Value::Null) => errors.push(FieldError::required("spec", "")),
        Some(spec) => check_node(&schema["properties"]["spec"], spec, "spec", &mut errors),
    }
    errors
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// How the API server prints a bad value: strings quoted, everything else as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn check_node(schema: &Value, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            out.push(FieldError::invalid(
                path,
                shown(value),
                format!("{path} in body must be of type int-or-string"),
            ));
        }
        return;
    }
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let Some(ty) = schema.get("type").and_then(Value::as_str) else {
        // Untyped nodes only exist with preserve-unknown-fields: anything goes.
        return;
    };
    let actual = type_name(value);
    let type_ok = actual == ty || (ty == "number" && actual == "integer");
    if !type_ok {
        out.push(FieldError::invalid(
            path,
            shown(value),
            format!("{path} in body must be of type {ty}: {}", quote(actual)),
        ));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(shown).collect();
        let supported: Vec<&str> = supported.iter().map(String::as_str).collect();
        out.push(FieldError::not_supported(path, shown(value), &supported));
    }
    match value {
        Value::String(s) => check_string(schema, s, path, out),
        Value::Number(_) => {
            if let (Some(min), Some(v)) = (
                schema.get("minimum").and_then(Value::as_f64),
                value.as_f64(),
            ) && v < min
            {
                out.push(FieldError::invalid(
                    path,
                    shown(value),
                    format!("{path} in body should be greater than or equal to {min}"),
                ));
            }
        }
        Value::Array(items) => {
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                out.push(FieldError::invalid(
                    path,
                    shown(value),
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set") {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        out.push(FieldError::duplicate(format!("{path}[{i}]"), shown(item)));
                    }
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check_node(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = required.as_str()
                    && map.get(name).is_none_or(Value::is_null)
                {
                    out.push(FieldError::required(format!("{path}.{name}"), ""));
                }
            }
            for (name, child) in map {
                let child_path = format!("{path}.{name}");
                if child.is_null() {
                    // The API server drops nulls of non-nullable fields before validating.
                    continue;
                }
                if let Some(child_schema) = props.and_then(|p| p.get(name)) {
                    check_node(child_schema, child, &child_path, out);
                } else if let Some(extra) =
                    schema.get("additionalProperties").filter(|a| a.is_object())
                {
                    check_node(extra, child, &child_path, out);
                } else if !preserve {
                    out.push(FieldError::forbidden(
                        child_path,
                        "unknown field; the API server rejects it under strict field validation",
                    ));
                }
            }
            for rule in schema
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
                let message = rule.get("message").and_then(Value::as_str).unwrap_or(text);
                if evaluate_rule(text, map) == Some(false) {
                    out.push(FieldError::invalid(path, "object", message));
                }
            }
        }
        _ => {}
    }
}

fn check_string(schema: &Value, s: &str, path: &str, out: &mut Vec<FieldError>) {
    let chars = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && chars < min
    {
        out.push(FieldError::invalid(
            path,
            s,
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars > max
    {
        out.push(FieldError::invalid(
            path,
            s,
            format!("{path} in body should be at most {max} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && matches_pattern(pattern, s) == Some(false)
    {
        out.push(FieldError::invalid(
            path,
            s,
            format!("{path} in body should match '{pattern}'"),
        ));
    }
}

/// Evaluates one of `KNOWN_PATTERNS`; `None` for a pattern this module does not know.
pub fn matches_pattern(pattern: &str, s: &str) -> Option<bool> {
    let alnum_dash_underscore = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    Some(match pattern {
        "^(https?|grpc)://.+" => ["http://", "https://", "grpc://"].iter().any(|p| {
            s.strip_prefix(p)
                .and_then(|rest| rest.chars().next())
                .is_some_and(|c| c != '\n')
        }),
        r"^v[0-9]+\.[0-9]+\.[0-9]+$" => s.strip_prefix('v').is_some_and(|rest| {
            let parts: Vec<&str> = rest.split('.').collect();
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        }),
        "^[A-Za-z0-9_-]+$" => !s.is_empty() && s.chars().all(alnum_dash_underscore),
        "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" => {
            s.chars().next().is_some_and(lower_alnum)
                && s.chars().last().is_some_and(lower_alnum)
                && s.chars().all(|c| lower_alnum(c) || c == '-')
        }
        _ => return None,
    })
}

/// Evaluates `MACHINE_SET_CEL_RULE` or `DELETE_POLICY_CEL_RULE` on an object; `None` for a rule this module does not know.
pub fn evaluate_rule(rule: &str, object: &serde_json::Map<String, Value>) -> Option<bool> {
    let has = |key: &str| object.get(key).is_some_and(|v| !v.is_null());
    let is_true = |key: &str| object.get(key) == Some(&Value::Bool(true));
    match rule {
        MACHINE_SET_CEL_RULE => Some(has("machines") != has("machineClass")),
        DELETE_POLICY_CEL_RULE => Some(!(is_true("orphan") && is_true("destroyMachines"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let m = |p: &str, s: &str| matches_pattern(p, s).unwrap();
        assert!(m(KNOWN_PATTERNS[0], "https://omni.example.com"));
        assert!(m(KNOWN_PATTERNS[0], "grpc://127.0.0.1:8090"));
        assert!(!m(KNOWN_PATTERNS[0], "https://"));
        assert!(!m(KNOWN_PATTERNS[0], "ftp://x"));
        assert!(m(KNOWN_PATTERNS[1], "v1.35.0"));
        assert!(!m(KNOWN_PATTERNS[1], "1.35.0"));
        assert!(!m(KNOWN_PATTERNS[1], "v1.35"));
        assert!(!m(KNOWN_PATTERNS[1], "v1.35.0-rc1"));
        assert!(m(KNOWN_PATTERNS[2], "gpu_workers-1"));
        assert!(!m(KNOWN_PATTERNS[2], "gpu.workers"));
        assert!(!m(KNOWN_PATTERNS[2], ""));
        assert!(m(KNOWN_PATTERNS[3], "a"));
        assert!(m(KNOWN_PATTERNS[3], "flux-system"));
        assert!(!m(KNOWN_PATTERNS[3], "-a"));
        assert!(!m(KNOWN_PATTERNS[3], "a-"));
        assert!(!m(KNOWN_PATTERNS[3], "Apps"));
        assert_eq!(matches_pattern("^x$", "x"), None);
    }

    #[test]
    fn rules() {
        let obj = |v: Value| v.as_object().cloned().unwrap();
        let r = MACHINE_SET_CEL_RULE;
        assert_eq!(
            evaluate_rule(r, &obj(serde_json::json!({"machines": ["a"]}))),
            Some(true)
        );
        assert_eq!(
            evaluate_rule(r, &obj(serde_json::json!({"machineClass": {}}))),
            Some(true)
        );
        assert_eq!(evaluate_rule(r, &obj(serde_json::json!({}))), Some(false));
        assert_eq!(
            evaluate_rule(
                r,
                &obj(serde_json::json!({"machines": [], "machineClass": {}}))
            ),
            Some(false)
        );
        let d = DELETE_POLICY_CEL_RULE;
        assert_eq!(
            evaluate_rule(d, &obj(serde_json::json!({"orphan": true}))),
            Some(true)
        );
        assert_eq!(
            evaluate_rule(
                d,
                &obj(serde_json::json!({"orphan": true, "destroyMachines": true}))
            ),
            Some(false)
        );
        assert_eq!(
            evaluate_rule("self.x > 1", &obj(serde_json::json!({}))),
            None
        );
    }
}
