//! Field ownership for server-side apply: conflicts between managers, `force`, and removal of
//! fields a manager stopped applying. Ownership is read from the `Apply` and `Update` entries of
//! `metadata.managedFields` (FieldsV1: nested `f:<key>` objects; an empty object is a leaf;
//! lists are atomic leaves).

use serde_json::{Map, Value};

use crate::error::{ApiError, Cause};

/// A field path, e.g. `["spec", "replicas"]`.
type Path = Vec<String>;

/// The leaf paths of a FieldsV1 set.
pub(crate) fn leaf_paths(fields: &Value) -> Vec<Path> {
    fn walk(v: &Value, prefix: &mut Path, out: &mut Vec<Path>) {
        let Some(map) = v.as_object() else { return };
        let children: Vec<(&String, &Value)> =
            map.iter().filter(|(k, _)| k.starts_with("f:")).collect();
        if children.is_empty() {
            if !prefix.is_empty() {
                out.push(prefix.clone());
            }
            return;
        }
        for (k, child) in children {
            prefix.push(k.trim_start_matches("f:").to_owned());
            walk(child, prefix, out);
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    walk(fields, &mut Vec::new(), &mut out);
    out
}

fn overlaps(a: &Path, b: &Path) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

fn get<'a>(obj: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

fn remove(obj: &mut Value, path: &Path) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut v = obj;
    for k in parents {
        match v.get_mut(k) {
            Some(next) => v = next,
            None => return,
        }
    }
    if let Some(m) = v.as_object_mut() {
        m.remove(last);
    }
}

/// Removes `path` from a FieldsV1 set, dropping parents left empty.
fn remove_field(fields: &mut Value, path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    let key = format!("f:{first}");
    let Some(map) = fields.as_object_mut() else {
        return false;
    };
    let Some(child) = map.get_mut(&key) else {
        return false;
    };
    if rest.is_empty()
        || !child
            .as_object()
            .is_some_and(|m| m.keys().any(|k| k.starts_with("f:")))
    {
        map.remove(&key);
        return true;
    }
    let removed = remove_field(child, rest);
    if child.as_object().is_some_and(Map::is_empty) {
        map.remove(&key);
    }
    removed
}

fn dotted(path: &Path) -> String {
    format!(".{}", path.join("."))
}

fn entry_str<'a>(e: &'a Value, k: &str) -> &'a str {
    e.get(k).and_then(Value::as_str).unwrap_or_default()
}

/// Checks an apply by `manager` of `applied` (whose FieldsV1 set is `applied_fields`) over
/// `live`, and returns the managedFields other managers keep and the paths to remove from the
/// merged object. Without `force`, fields owned by another manager whose value would change are
/// a 409 Conflict naming each field, as on the real server; with `force` they change owner.
/// (`group`, `resource` and `name` only label the error.)
#[allow(clippy::too_many_arguments)]
pub(crate) fn resolve(
    live: &Value,
    applied: &Value,
    applied_fields: &Value,
    manager: &str,
    force: bool,
    group: &str,
    resource: &str,
    name: &str,
) -> Result<(Vec<Value>, Vec<Path>), ApiError> {
    let entries: Vec<Value> = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // Maps are owned key by key: an empty object in the applied configuration owns nothing.
    let applied_paths: Vec<Path> = leaf_paths(applied_fields)
        .into_iter()
        .filter(|p| !get(applied, p).is_some_and(Value::is_object))
        .collect();
    let mut conflicts: Vec<(String, Path)> = Vec::new();
    let mut others: Vec<Value> = Vec::new();
    let mut previous: Vec<Path> = Vec::new();
    for mut e in entries {
        let mine = entry_str(&e, "manager") == manager;
        if mine && entry_str(&e, "operation") == "Apply" {
            // Empty maps it applied own nothing either.
            previous = leaf_paths(e.get("fieldsV1").unwrap_or(&Value::Null))
                .into_iter()
                .filter(|p| !get(live, p).is_some_and(|v| v.as_object().is_some_and(Map::is_empty)))
                .collect();
            continue;
        }
        if mine {
            others.push(e);
            continue;
        }
        let owned = leaf_paths(e.get("fieldsV1").unwrap_or(&Value::Null));
        let label = if entry_str(&e, "operation") == "Update" {
            format!(
                "conflict with \"{}\" using {}",
                entry_str(&e, "manager"),
                entry_str(&e, "apiVersion")
            )
        } else {
            format!("conflict with \"{}\"", entry_str(&e, "manager"))
        };
        for p in &applied_paths {
            for q in owned.iter().filter(|q| overlaps(p, q)) {
                let deeper = if q.len() > p.len() { q } else { p };
                if get(live, deeper) != get(applied, deeper) {
                    if force {
                        if let Some(f) = e.get_mut("fieldsV1") {
                            remove_field(f, q);
                        }
                    } else if !conflicts.iter().any(|(l, c)| *l == label && c == deeper) {
                        conflicts.push((label.clone(), deeper.clone()));
                    }
                }
            }
        }
        if e.get("fieldsV1")
            .is_some_and(|f| f.as_object().is_some_and(|m| !m.is_empty()))
        {
            others.push(e);
        }
    }
    if !conflicts.is_empty() {
        let causes: Vec<Cause> = conflicts
            .iter()
            .map(|(label, p)| Cause {
                reason: "FieldManagerConflict".into(),
                message: label.clone(),
                field: dotted(p),
            })
            .collect();
        let n = conflicts.len();
        let detail = if n == 1 {
            format!("{}: {}", conflicts[0].0, dotted(&conflicts[0].1))
        } else {
            let lines: Vec<String> = conflicts
                .iter()
                .map(|(l, p)| format!("{l}: {}", dotted(p)))
                .collect();
            lines.join("\n")
        };
        let mut err = ApiError::conflict(group, resource, name, "");
        err.message = format!(
            "Apply failed with {n} conflict{}: {detail}",
            if n == 1 { "" } else { "s" }
        );
        if let Some(d) = err.details.as_mut() {
            d.causes = causes;
        }
        return Err(err);
    }
    let still_owned = |p: &Path| {
        applied_paths.iter().any(|a| overlaps(a, p))
            || others.iter().any(|e| {
                leaf_paths(e.get("fieldsV1").unwrap_or(&Value::Null))
                    .iter()
                    .any(|q| overlaps(q, p))
            })
    };
    let dropped: Vec<Path> = previous
        .into_iter()
        .filter(|p| p.first().map(String::as_str) != Some("metadata") || p.len() > 2)
        .filter(|p| !still_owned(p))
        .collect();
    Ok((others, dropped))
}

/// Metadata that identifies the object or that the server maintains: never owned by an
/// update.
const SYSTEM_METADATA: [&str; 10] = [
    "name",
    "namespace",
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

/// Leaf paths whose value differs between `old` and `new`: `(set, removed)`, where `set`
/// holds paths added or changed in `new` and `removed` paths only `old` has. Lists are
/// atomic leaves, as in our FieldsV1 sets.
fn changed_paths(old: &Value, new: &Value) -> (Vec<Path>, Vec<Path>) {
    fn walk(
        old: Option<&Value>,
        new: Option<&Value>,
        at: &mut Path,
        set: &mut Vec<Path>,
        removed: &mut Vec<Path>,
    ) {
        let is_system = |k: &str, at: &Path| {
            (at.is_empty() && matches!(k, "apiVersion" | "kind"))
                || (at.len() == 1 && at[0] == "metadata" && SYSTEM_METADATA.contains(&k))
        };
        match (old, new) {
            (Some(Value::Object(o)), Some(Value::Object(n))) => {
                for (k, nv) in n {
                    if is_system(k, at) {
                        continue;
                    }
                    at.push(k.clone());
                    walk(o.get(k), Some(nv), at, set, removed);
                    at.pop();
                }
                for (k, ov) in o {
                    if is_system(k, at) || n.contains_key(k) {
                        continue;
                    }
                    at.push(k.clone());
                    walk(Some(ov), None, at, set, removed);
                    at.pop();
                }
            }
            (None, Some(Value::Object(n))) if !n.is_empty() => {
                for (k, nv) in n {
                    if is_system(k, at) {
                        continue;
                    }
                    at.push(k.clone());
                    walk(None, Some(nv), at, set, removed);
                    at.pop();
                }
            }
            (Some(_), None) => removed.push(at.clone()),
            (o, Some(n)) if o != Some(n) && !at.is_empty() => set.push(at.clone()),
            _ => {}
        }
    }
    let (mut set, mut removed) = (Vec::new(), Vec::new());
    walk(
        Some(old),
        Some(new),
        &mut Vec::new(),
        &mut set,
        &mut removed,
    );
    (set, removed)
}

/// Adds `path` to a FieldsV1 set.
fn insert_field(fields: &mut Value, path: &[String]) {
    let mut at = fields;
    for k in path {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        at = map
            .entry(format!("f:{k}"))
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Records a non-apply write (create, update, patch) in `managedFields` the way the real
/// server does: `manager` gets an `Update` entry (per subresource) owning every field the
/// write set or changed, and those fields leave every other manager's set (an update takes
/// ownership without conflicts). A write that changes nothing records nothing.
pub(crate) fn record_update(
    old: Option<&Value>,
    obj: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let empty = Value::Object(Map::new());
    let (set, removed) = changed_paths(old.unwrap_or(&empty), obj);
    if set.is_empty() && removed.is_empty() {
        return;
    }
    // A body that clears managedFields explicitly resets ownership, as on the real server.
    let cleared = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    let mut entries: Vec<Value> = if cleared {
        Vec::new()
    } else {
        old.and_then(|o| o.pointer("/metadata/managedFields"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let is_mine = |e: &Value| {
        entry_str(e, "manager") == manager
            && entry_str(e, "operation") == "Update"
            && e.get("subresource").and_then(Value::as_str) == subresource
    };
    let mut mine = entries
        .iter()
        .find(|e| is_mine(e))
        .and_then(|e| e.get("fieldsV1").cloned())
        .unwrap_or_else(|| Value::Object(Map::new()));
    entries.retain(|e| !is_mine(e));
    for e in &mut entries {
        if let Some(f) = e.get_mut("fieldsV1") {
            for p in set.iter().chain(&removed) {
                remove_field(f, p);
            }
        }
    }
    entries.retain(|e| {
        e.get("fieldsV1")
            .is_some_and(|f| f.as_object().is_some_and(|m| !m.is_empty()))
    });
    for p in &removed {
        remove_field(&mut mine, p);
    }
    for p in &set {
        insert_field(&mut mine, p);
    }
    if mine.as_object().is_some_and(|m| !m.is_empty()) {
        let mut entry = serde_json::json!({
            "manager": manager,
            "operation": "Update",
            "apiVersion": obj.get("apiVersion").cloned().unwrap_or(Value::Null),
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": mine,
        });
        if let Some(sub) = subresource {
            entry["subresource"] = Value::String(sub.to_owned());
        }
        entries.push(entry);
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

/// Removes `paths` from `obj` (fields a manager stopped applying and nobody else owns).
pub(crate) fn remove_paths(obj: &mut Value, paths: &[Path]) {
    for p in paths {
        remove(obj, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Value {
        v
    }

    #[test]
    fn an_update_takes_the_fields_it_changes_from_other_managers() {
        let old = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "resourceVersion": "5", "managedFields": [
                {"manager": "flux", "operation": "Apply", "apiVersion": "v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}
            ]},
            "data": {"a": "1", "b": "2"}
        });
        let mut new = old.clone();
        new["data"]["a"] = json!("changed");
        new["metadata"]["labels"] = json!({"team": "blue"});
        new["metadata"]["resourceVersion"] = json!("6");
        record_update(
            Some(&old),
            &mut new,
            "kubectl-edit",
            None,
            "2026-01-01T00:00:00Z",
        );
        let entries = new["metadata"]["managedFields"].as_array().unwrap().clone();
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(entries[0]["manager"], "flux");
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {"f:b": {}}}));
        assert_eq!(entries[1]["manager"], "kubectl-edit");
        assert_eq!(entries[1]["operation"], "Update");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:team": {}}}})
        );

        // Nothing changed: nothing recorded (no new timestamp, no write).
        let mut same = new.clone();
        record_update(Some(&new), &mut same, "other", None, "2027-01-01T00:00:00Z");
        assert_eq!(same, new);

        // A status write is recorded per subresource; removing a field drops it everywhere.
        let mut status = new.clone();
        status["status"] = json!({"ready": true});
        record_update(Some(&new), &mut status, "kubectl-edit", Some("status"), "t");
        let mut removal = status.clone();
        removal["data"].as_object_mut().unwrap().remove("b");
        record_update(Some(&status), &mut removal, "kubectl-edit", None, "t");
        let entries = removal["metadata"]["managedFields"].as_array().unwrap();
        assert!(
            entries.iter().all(|e| e["manager"] != "flux"),
            "{entries:?}"
        );
        assert!(entries.iter().any(|e| e["subresource"] == "status"
            && e["fieldsV1"] == json!({"f:status": {"f:ready": {}}})));
    }

    #[test]
    fn a_create_owns_every_field_it_sets() {
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "uid": "u"}, "data": {"a": "1"}});
        record_update(None, &mut obj, "creator", None, "t");
        assert_eq!(
            obj["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:a": {}}})
        );
    }

    #[test]
    fn leaf_paths_walk_fields_v1() {
        let f = fields(
            json!({"f:spec": {"f:replicas": {}, "f:template": {"f:image": {}}}, "f:metadata": {"f:labels": {"f:a": {}}}}),
        );
        let mut p = leaf_paths(&f);
        p.sort();
        assert_eq!(
            p,
            vec![
                vec!["metadata".to_string(), "labels".into(), "a".into()],
                vec!["spec".to_string(), "replicas".into()],
                vec!["spec".to_string(), "template".into(), "image".into()],
            ]
        );
    }
}
