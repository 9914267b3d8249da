//! Patch algorithms over JSON documents: RFC 6902 JSON patch, RFC 7386 merge patch, the
//! strategic merge the built-in types accept, and the FieldsV1 set of an applied configuration.

use serde_json::{Value, json};

use crate::error::ApiError;

/// RFC 6902 JSON patch: add, remove, replace, test, copy, move.
pub(crate) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), ApiError> {
    let ops = ops
        .as_array()
        .ok_or_else(|| ApiError::bad_request("a JSON patch must be an array of operations"))?;
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad_request("JSON patch operation without path"))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| ApiError::bad_request("JSON patch operation without value"))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| ApiError::bad_request("JSON patch operation without from"))
        };
        match kind {
            "add" => pointer_add(doc, path, value()?)?,
            "remove" => {
                pointer_remove(doc, path)?;
            }
            "replace" => {
                pointer_remove(doc, path)?;
                pointer_add(doc, path, value()?)?;
            }
            "test" => {
                // As in the API server's JSON patch library, a missing path equals `null`
                // (kube-rs's finalizer helper relies on this for objects without finalizers).
                let expected = value()?;
                let actual = doc.pointer(path).unwrap_or(&Value::Null);
                if *actual != expected {
                    return Err(ApiError::with_code(
                        422,
                        &format!(
                            "the server rejected our request due to an error in our request: testing value {path} failed"
                        ),
                    ));
                }
            }
            "copy" => {
                let v = doc
                    .pointer(&from()?)
                    .cloned()
                    .ok_or_else(|| ApiError::with_code(422, "copy from a missing path"))?;
                pointer_add(doc, path, v)?;
            }
            "move" => {
                let v = pointer_remove(doc, &from()?)?;
                pointer_add(doc, path, v)?;
            }
            other => {
                return Err(ApiError::bad_request(&format!(
                    "unexpected JSON patch operation {other:?}"
                )));
            }
        }
    }
    Ok(())
}

fn split_pointer(path: &str) -> Result<(String, String), ApiError> {
    let idx = path
        .rfind('/')
        .ok_or_else(|| ApiError::bad_request(&format!("invalid JSON pointer {path:?}")))?;
    let last = path[idx + 1..].replace("~1", "/").replace("~0", "~");
    Ok((path[..idx].to_string(), last))
}

fn pointer_add(doc: &mut Value, path: &str, value: Value) -> Result<(), ApiError> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    let missing = || {
        ApiError::with_code(
            422,
            &format!(
                "the server rejected our request due to an error in our request: doc is missing path: {path:?}"
            ),
        )
    };
    match doc.pointer_mut(&parent).ok_or_else(missing)? {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last.parse().map_err(|_| missing())?;
                if i > a.len() {
                    return Err(missing());
                }
                a.insert(i, value);
            }
        }
        _ => return Err(missing()),
    }
    Ok(())
}

fn pointer_remove(doc: &mut Value, path: &str) -> Result<Value, ApiError> {
    let (parent, last) = split_pointer(path)?;
    let missing = || {
        ApiError::with_code(
            422,
            &format!(
                "the server rejected our request due to an error in our request: doc is missing path: {path:?}"
            ),
        )
    };
    match doc.pointer_mut(&parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i >= a.len() {
                return Err(missing());
            }
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// Strategic merge for built-ins: like a merge patch, except lists of objects
/// keyed by `name` (containers, env, ports, volumes, volumeMounts) merge per
/// element, and the `$patch`/`$retainKeys`/`$setElementOrder` directives are honoured
/// or tolerated.
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut clean = patch.clone();
        strip_directives(&mut clean);
        *target = clean;
        return;
    }
    if !target.is_object() {
        *target = json!({});
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()) || p.contains_key(k));
    }
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(Value::Array(cur)), Value::Array(items)) if keyed_by_name(items) => {
                for item in items {
                    let key = item.get("name").cloned();
                    let pos = cur.iter().position(|c| c.get("name") == key.as_ref());
                    let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    match (pos, delete) {
                        (Some(i), true) => {
                            cur.remove(i);
                        }
                        (None, true) => {}
                        (Some(i), false) => strategic_merge(&mut cur[i], item),
                        (None, false) => {
                            let mut clean = item.clone();
                            strip_directives(&mut clean);
                            cur.push(clean);
                        }
                    }
                }
            }
            (Some(cur), _) if v.is_object() => strategic_merge(cur, v),
            _ => {
                let mut clean = v.clone();
                strip_directives(&mut clean);
                t.insert(k.clone(), clean);
            }
        }
    }
}

/// A list merges per element when every element is an object with a `name`.
fn keyed_by_name(items: &[Value]) -> bool {
    !items.is_empty() && items.iter().all(|i| i.get("name").is_some())
}

/// Removes `$`-directives so they never get stored.
fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// FieldsV1 of an applied configuration: `f:<key>` per object field, `.` for leaves.
pub(crate) fn field_set(v: &Value, out: &mut Value) {
    if let (Some(m), Some(o)) = (v.as_object(), out.as_object_mut()) {
        for (k, child) in m {
            let mut sub = json!({});
            if child.is_object() {
                field_set(child, &mut sub);
            }
            o.insert(format!("f:{k}"), sub);
        }
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Some(t) = target.as_object_mut() {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_op_treats_a_missing_path_as_null() {
        let mut doc = json!({"metadata": {"name": "a"}});
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x"]},
        ]);
        json_patch(&mut doc, &ops).unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["x"]));
        let again = json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]);
        assert_eq!(json_patch(&mut doc, &again).unwrap_err().code, 422);
    }
}
