//! Structural-schema behaviour of custom resources, in the API server's order: **prune**
//! fields the schema does not know (unless `x-kubernetes-preserve-unknown-fields`), drop `null`s
//! of non-nullable fields, apply **defaults**, then **validate** (types, `enum`, `required`,
//! bounds, lengths, `pattern`, item counts). Validation errors are one 422 Invalid with a cause
//! per field, worded like the real server. CEL rules (`x-kubernetes-validations`) are evaluated
//! for the subset `cel.rs` implements; others are not evaluated (see the README).

use std::sync::Arc;

use serde_json::Value;

use crate::error::{ApiError, Cause};
use crate::store::{ResourceType, Store};

/// The `openAPIV3Schema` of the CRD version serving `t`, when `t` is a custom resource.
pub(crate) fn crd_schema(store: &Store, t: &ResourceType) -> Option<Value> {
    shared_schema(store, t).map(Arc::unwrap_or_clone)
}

/// [`crd_schema`] without a copy: looked up once per CRD change and shared by every write.
fn shared_schema(store: &Store, t: &ResourceType) -> Option<Arc<Value>> {
    store.crd_version(t)?.schema
}

/// Prunes fields the CRD schema of `t` does not know and applies its defaults; returns the
/// paths of the pruned fields (`spec.values`, `spec.items[0].x`), which `fieldValidation`
/// reports as unknown. Built-ins pass untouched.
pub(crate) fn prune_and_default_object(
    store: &Store,
    t: &ResourceType,
    obj: &mut Value,
) -> Vec<String> {
    let mut pruned = Vec::new();
    let Some(schema) = shared_schema(store, t) else {
        return pruned;
    };
    let Some(root) = obj.as_object_mut() else {
        return pruned;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let preserve = preserves(&schema);
    // apiVersion, kind and metadata are the API machinery's, never pruned.
    let keys: Vec<String> = root.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => {
                if let Some(v) = root.get_mut(&key) {
                    if v.is_null() && !nullable(sub) {
                        root.remove(&key);
                        continue;
                    }
                    prune_and_default(v, sub, &key, &mut pruned);
                }
            }
            None if !preserve => {
                root.remove(&key);
                pruned.push(key);
            }
            None => {}
        }
    }
    if let Some(props) = props {
        for (key, sub) in props {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if !root.contains_key(key)
                && let Some(d) = sub.get("default")
            {
                let mut v = d.clone();
                // Defaults are the CRD author's: what they prune is nobody's unknown field.
                prune_and_default(&mut v, sub, key, &mut Vec::new());
                root.insert(key.clone(), v);
            }
        }
    }
    pruned
}

/// Validates a write of `obj` (`old` is what it replaces; `None` for a create), after
/// [`prune_and_default_object`]: its metadata, then its CRD schema and CEL rules. One 422
/// Invalid with a cause per failing field, in the API server's order.
pub(crate) fn validate(
    store: &Store,
    t: &ResourceType,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let mut causes = crate::object_meta::validate(t, obj, old);
    if let Some(schema) = shared_schema(store, t) {
        causes = validation_causes(&schema, obj, causes);
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(ApiError::invalid(&t.group, &t.kind, name, causes))
}

/// `causes` (the metadata's) followed by those of `obj` against `schema` (the CRD's schema), in
/// the API server's order: schema errors, then the CEL rules, which are not evaluated at all when a
/// schema error "blocks" them (a wrong type, a missing required field, an unsupported enum
/// value, too long, too many): one `<nil>` cause then says so, whenever the schema has rules.
fn validation_causes(schema: &Value, obj: &Value, mut causes: Vec<Cause>) -> Vec<Cause> {
    validate_object(obj, schema, "", &mut causes, true);
    if !has_rules(schema) {
        return causes;
    }
    let blocking = causes.iter().any(|c| {
        matches!(
            c.reason.as_str(),
            "FieldValueTypeInvalid"
                | "FieldValueRequired"
                | "FieldValueNotSupported"
                | "FieldValueTooLong"
                | "FieldValueTooMany"
        )
    });
    if blocking {
        causes.push(cause(
            "FieldValueInvalid",
            "<nil>",
            "Invalid value: null: some validation rules were not checked because the object \
             was invalid; correct the existing errors to complete validation"
                .to_owned(),
        ));
    } else {
        validate_rules(obj, schema, "", &mut causes, true);
    }
    causes
}

/// Whether any node of `schema` carries `x-kubernetes-validations`.
fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.contains_key("x-kubernetes-validations") || map.values().any(has_rules)
        }
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

/// Evaluates the CEL rules below `v`, in schema order (a node's rules, then its children).
fn validate_rules(v: &Value, schema: &Value, path: &str, out: &mut Vec<Cause>, root: bool) {
    if v.is_null() {
        return;
    }
    cel_rules(v, schema, path, out);
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(key)).or(additional) {
                    validate_rules(child, sub, &field(path, key), out, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_rules(item, item_schema, &format!("{path}[{i}]"), out, false);
                }
            }
        }
        _ => {}
    }
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn nullable(schema: &Value) -> bool {
    schema.get("nullable").and_then(Value::as_bool) == Some(true)
}

/// Prunes unknown fields and applies defaults below `v` (at `path`), recording what it pruned.
fn prune_and_default(v: &mut Value, schema: &Value, path: &str, pruned: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            if props.is_none() && additional.is_none() {
                // Without properties an object keeps what it has only if told to; an
                // embedded resource or int-or-string is not an object schema to prune.
                if !preserves(schema)
                    && schema.get("type").and_then(Value::as_str) == Some("object")
                    && schema.get("x-kubernetes-embedded-resource").is_none()
                {
                    pruned.extend(map.keys().map(|k| field(path, k)));
                    map.clear();
                }
                return;
            }
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let sub = props.and_then(|p| p.get(&key)).or(additional);
                match sub {
                    Some(sub) => {
                        if map.get(&key).is_some_and(Value::is_null) && !nullable(sub) {
                            map.remove(&key);
                        } else if let Some(child) = map.get_mut(&key) {
                            prune_and_default(child, sub, &field(path, &key), pruned);
                        }
                    }
                    None if !preserves(schema) => {
                        map.remove(&key);
                        pruned.push(field(path, &key));
                    }
                    None => {}
                }
            }
            if let Some(props) = props {
                for (key, sub) in props {
                    if !map.contains_key(key)
                        && let Some(d) = sub.get("default")
                    {
                        let mut value = d.clone();
                        prune_and_default(&mut value, sub, key, &mut Vec::new());
                        map.insert(key.clone(), value);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_and_default(item, item_schema, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

fn field(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause {
        reason: reason.to_owned(),
        message,
        field: field.to_owned(),
    }
}

/// `x-kubernetes-validations`: each rule in the supported CEL subset is evaluated with `self`
/// bound to the value; a failing rule is `Invalid value: <message>` (the API server omits the
/// value) at the schema node's path (or its `fieldPath`). Rules outside the subset are not
/// evaluated.
fn cel_rules(v: &Value, schema: &Value, path: &str, out: &mut Vec<Cause>) {
    let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    for rule in rules {
        let Some(text) = rule.get("rule").and_then(Value::as_str) else {
            continue;
        };
        let failure = match crate::cel::holds(text, v) {
            Ok(true) | Err(crate::cel::CelError::Unsupported(_)) => continue,
            Ok(false) => rule
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("failed rule: {text}")),
            Err(crate::cel::CelError::Runtime(e)) => format!("{e} evaluating rule: {text}"),
        };
        let at = match rule.get("fieldPath").and_then(Value::as_str) {
            Some(extra) => format!("{path}{extra}"),
            None => path.to_owned(),
        };
        let reason = rule
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("FieldValueInvalid");
        let message = match reason {
            "FieldValueForbidden" => format!("Forbidden: {failure}"),
            "FieldValueRequired" => format!("Required value: {failure}"),
            "FieldValueDuplicate" => format!("Duplicate value: {failure}"),
            _ => format!("Invalid value: {failure}"),
        };
        out.push(cause(reason, &at, message));
    }
}

/// `x-kubernetes-list-type: set` items and `map` keys must be unique: each repeat is a
/// `Duplicate value` at its index, worded like the API server (map keys as Go prints them).
fn list_type_duplicates(items: &[Value], schema: &Value, path: &str, out: &mut Vec<Cause>) {
    let key_of = |item: &Value| -> Option<(Value, String)> {
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => Some((item.clone(), show(item))),
            Some("map") => {
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut key = serde_json::Map::new();
                for k in keys {
                    key.insert(k.to_owned(), item.get(k).cloned().unwrap_or(Value::Null));
                }
                let shown = format!("map[string]interface {{}}{}", Value::Object(key.clone()));
                Some((Value::Object(key), shown))
            }
            _ => None,
        }
    };
    let mut seen: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some((key, shown)) = key_of(item) else {
            return;
        };
        if seen.contains(&key) {
            out.push(cause(
                "FieldValueDuplicate",
                &format!("{path}[{i}]"),
                format!("Duplicate value: {shown}"),
            ));
        } else {
            seen.push(key);
        }
    }
}

/// The JSON type of `v` as the API server names it in `Invalid value: "<type>"` messages.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        // Whole numbers decode as integers on the real server (see `numbers::normalize`).
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
    }
}

fn type_matches(v: &Value, schema: &Value) -> bool {
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return v.is_string() || v.is_i64() || v.is_u64();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    }
}

fn validate_object(v: &Value, schema: &Value, path: &str, out: &mut Vec<Cause>, root: bool) {
    if v.is_null() {
        return;
    }
    if !type_matches(v, schema) {
        let int_or_string = schema
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true);
        let ty = match int_or_string {
            true => "integer,string",
            false => schema.get("type").and_then(Value::as_str).unwrap_or(""),
        };
        let kind = json_type(v);
        out.push(cause(
            "FieldValueTypeInvalid",
            path,
            format!("Invalid value: \"{kind}\": {path} in body must be of type {ty}: \"{kind}\""),
        ));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(show).collect();
        out.push(cause(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                show(v),
                list.join(", ")
            ),
        ));
    }
    match v {
        Value::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for r in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        out.push(cause(
                            "FieldValueRequired",
                            &field(path, r),
                            "Required value".to_owned(),
                        ));
                    }
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(key)).or(additional) {
                    validate_object(child, sub, &field(path, key), out, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                out.push(cause(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {}: must have at most {max} items", items.len()),
                ));
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {}: {path} in body should have at least {min} items",
                        items.len()
                    ),
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_object(item, item_schema, &format!("{path}[{i}]"), out, false);
                }
            }
            list_type_duplicates(items, schema, path, out);
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                out.push(cause(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {}: {path} in body should be at least {min} chars long",
                        show(v)
                    ),
                ));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && let Some(re) = crate::patterns::compiled(pattern)
                && !re.is_match(s)
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {}: {path} in body should match '{pattern}'",
                        show(v)
                    ),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                let exclusive =
                    schema.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
                if x < min || (exclusive && x == min) {
                    let rel = if exclusive {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    out.push(cause(
                        "FieldValueInvalid",
                        path,
                        format!(
                            "Invalid value: {n}: {path} in body should be {rel} {}",
                            crate::numbers::go_float(min)
                        ),
                    ));
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                let exclusive =
                    schema.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
                if x > max || (exclusive && x == max) {
                    let rel = if exclusive {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    out.push(cause(
                        "FieldValueInvalid",
                        path,
                        format!(
                            "Invalid value: {n}: {path} in body should be {rel} {}",
                            crate::numbers::go_float(max)
                        ),
                    ));
                }
            }
        }
        _ => {}
    }
}
