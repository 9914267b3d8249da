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
pub(crate) const KNOWN_PATTERNS: [&str; 5] = [
    "^(https?|grpc)://.+",
    r"^v[0-9]+\.[0-9]+\.[0-9]+$",
    "^[A-Za-z0-9_-]+$",
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
];

/// Checks a full object of `kind` against that kind's CRD schema. Unknown kinds yield no
/// errors (the caller reports them). `status` is not checked: users do not write it.
pub fn check(kind: &str, object: &Value) -> Vec<FieldError> {
    let Some(schema) = spec_schema(kind) else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    match object.get("spec") {
        None | Some(Value::Null) => errors.push(FieldError::required("spec", "")),
        Some(spec) => check_node(schema, spec, "spec", &mut errors),
    }
    errors
}

/// The schema of `kind`'s `spec`, as JSON (worked out once per process: generating the CRDs
/// is not cheap, and `validate` asks for every object).
fn spec_schema(kind: &str) -> Option<&'static Value> {
    static SCHEMAS: std::sync::OnceLock<Vec<(String, Value)>> = std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        super::crds()
            .into_iter()
            .filter_map(|crd| {
                let schema = crd
                    .spec
                    .versions
                    .first()?
                    .schema
                    .as_ref()?
                    .open_api_v3_schema
                    .as_ref()?;
                let schema = serde_json::to_value(schema).ok()?;
                Some((crd.spec.names.kind, schema["properties"]["spec"].clone()))
            })
            .collect()
    });
    schemas.iter().find(|(k, _)| k == kind).map(|(_, s)| s)
}

/// A copy of `object` whose `spec` fits the shapes of `kind`'s schema, so the admission rules
/// can run on an object the schema rejects, and every problem is found in one pass.
///
/// A value of the wrong type or outside its enum is dropped when optional, or replaced by
/// a zero value (empty, false, 0, the first enum value, an object with its required fields)
/// when required or a list item, which keeps the other items' indices; a missing required
/// field gets a zero value; unknown fields are dropped. Returns the copy and the paths that
/// were dropped or invented: what the admission rules say at or below them is about the
/// stand-ins, not the user's input.
pub fn decodable(kind: &str, object: &Value) -> (Value, Vec<String>) {
    let mut copy = object.clone();
    let mut changed = Vec::new();
    let Some(schema) = spec_schema(kind) else {
        return (copy, changed);
    };
    if let Some(map) = copy.as_object_mut() {
        match map.get_mut("spec") {
            Some(spec) if !spec.is_null() => repair(schema, spec, "spec", &mut changed),
            _ => {
                map.insert("spec".into(), zero(schema));
                changed.push("spec".into());
            }
        }
    }
    (copy, changed)
}

/// Whether `value` has the type (and, for enums, a value) `schema` allows, looking at this
/// node only.
fn fits(schema: &Value, value: &Value) -> bool {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return value.is_string() || value.is_i64() || value.is_u64();
    }
    let Some(ty) = schema.get("type").and_then(Value::as_str) else {
        return true;
    };
    let actual = type_name(value);
    (actual == ty || (ty == "number" && actual == "integer"))
        && schema
            .get("enum")
            .and_then(Value::as_array)
            .is_none_or(|allowed| allowed.contains(value))
}

/// The simplest value `schema` accepts in shape (bounds and patterns aside).
fn zero(schema: &Value) -> Value {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return Value::from(0);
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => Value::String(String::new()),
        Some("integer") => Value::from(schema.get("minimum").and_then(Value::as_i64).unwrap_or(0)),
        Some("number") => schema.get("minimum").cloned().unwrap_or(Value::from(0)),
        Some("boolean") => Value::Bool(false),
        Some("array") => Value::Array(Vec::new()),
        _ => {
            let mut map = serde_json::Map::new();
            for name in required_names(schema) {
                if let Some(child) = schema["properties"].get(name) {
                    map.insert(name.to_string(), zero(child));
                }
            }
            Value::Object(map)
        }
    }
}

fn required_names(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn repair(schema: &Value, value: &mut Value, path: &str, changed: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|a| a.is_object());
            let preserve =
                schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            let required: Vec<&str> = required_names(schema).collect();
            let names: Vec<String> = map.keys().cloned().collect();
            for name in names {
                let child_path = format!("{path}.{name}");
                let Some(child_schema) = props.and_then(|p| p.get(&name)).or(extra) else {
                    if !preserve {
                        map.remove(&name);
                    }
                    continue;
                };
                if map[&name].is_null() {
                    // The API server drops nulls; a required one is filled in below.
                    map.remove(&name);
                } else if !fits(child_schema, &map[&name]) {
                    if required.contains(&name.as_str()) {
                        map.insert(name.clone(), zero(child_schema));
                    } else {
                        map.remove(&name);
                    }
                    changed.push(child_path);
                } else if let Some(child) = map.get_mut(&name) {
                    repair(child_schema, child, &child_path, changed);
                }
            }
            for name in required {
                if !map.contains_key(name)
                    && let Some(child_schema) = props.and_then(|p| p.get(name))
                {
                    map.insert(name.to_string(), zero(child_schema));
                    changed.push(format!("{path}.{name}"));
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items") else {
                return;
            };
            for (i, item) in items.iter_mut().enumerate() {
                let item_path = format!("{path}[{i}]");
                if !fits(item_schema, item) {
                    *item = zero(item_schema);
                    changed.push(item_path);
                } else {
                    repair(item_schema, item, &item_path, changed);
                }
            }
        }
        _ => {}
    }
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
    let dns_label = |s: &str| {
        s.chars().next().is_some_and(lower_alnum)
            && s.chars().last().is_some_and(lower_alnum)
            && s.chars().all(|c| lower_alnum(c) || c == '-')
    };
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
        "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" => dns_label(s),
        // A DNS subdomain (`spec.serviceAccountName`): dot-separated labels.
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" => {
            s.split('.').all(dns_label)
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
        assert!(m(KNOWN_PATTERNS[4], "tenant"));
        assert!(m(KNOWN_PATTERNS[4], "tenant.reader-1"));
        assert!(!m(KNOWN_PATTERNS[4], "tenant."));
        assert!(!m(KNOWN_PATTERNS[4], ".tenant"));
        assert!(!m(KNOWN_PATTERNS[4], "tenant..a"));
        assert!(!m(KNOWN_PATTERNS[4], "Tenant"));
        assert!(!m(KNOWN_PATTERNS[4], ""));
        assert_eq!(matches_pattern("^x$", "x"), None);
    }

    #[test]
    fn decodable_copies_fit_the_schema_and_name_what_they_invented() {
        let object = serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniWorkers",
            "metadata": {"name": "w"},
            "spec": {
                "machines": "not-a-list",
                "machineClass": {"name": 7, "size": 1},
                "unknown": true,
            },
        });
        let (copy, changed) = decodable("OmniWorkers", &object);
        assert_eq!(
            changed,
            vec!["spec.machineClass.name", "spec.machines", "spec.clusterRef"]
        );
        assert_eq!(copy["spec"]["clusterRef"], serde_json::json!({"name": ""}));
        assert_eq!(copy["spec"]["machineClass"]["name"], "");
        assert!(copy["spec"].get("machines").is_none());
        assert!(copy["spec"].get("unknown").is_none());
        crate::api::validate_dynamic("OmniWorkers", &copy, None).unwrap();
        // A fitting object is left alone.
        let fine = serde_json::json!({"spec": {"clusterRef": {"name": "c"}, "machines": ["a"]}});
        assert_eq!(decodable("OmniWorkers", &fine), (fine.clone(), Vec::new()));
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
