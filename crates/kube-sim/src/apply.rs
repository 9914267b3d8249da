//! Field ownership for server-side apply: conflicts between managers, `force`, and removal of
//! fields a manager stopped applying. Ownership is read from the `Apply` and `Update` entries of
//! `metadata.managedFields` (FieldsV1: nested `f:<key>` objects; an empty object is a leaf;
//! lists are atomic leaves).

use serde_json::{Map, Value};

use crate::error::{ApiError, Cause};

/// A field path, e.g. `["spec", "replicas"]`. An element starting with [`RAW`] is a FieldsV1 key
/// as it is (`.`, `v:"x"`, `k:{"uid":"…"}`), any other element a field (`f:<element>`).
type Path = Vec<String>;

/// Marks a [`Path`] element that is a FieldsV1 key of its own rather than a field name.
const RAW: char = '\u{1}';

fn raw(key: &str) -> String {
    format!("{RAW}{key}")
}

/// The FieldsV1 key of a path element.
fn key_of(element: &str) -> String {
    match element.strip_prefix(RAW) {
        Some(key) => key.to_owned(),
        None => format!("f:{element}"),
    }
}

/// What of an object a write's managed fields record, by the kind's registry strategy and the
/// endpoint written through.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shape {
    /// Top-level fields the strategy resets, so nobody owns them through this endpoint.
    reset: Vec<&'static str>,
    /// When set, the only top-level field this endpoint writes (a `/status` subresource).
    only: Option<&'static str>,
    /// Top-level fields that are atomic structs (owned as a whole).
    atomic: Vec<&'static str>,
    /// Whether every object is a map that is owned itself (`.`) when created: true of custom
    /// resources; built-in kinds are typed, and only their real maps (labels, annotations,
    /// `data`) are.
    custom: bool,
}

impl Shape {
    /// The shape of writes to `group`/`resource` through `subresource`.
    pub(crate) fn of(
        group: &str,
        resource: &str,
        custom: bool,
        status_subresource: bool,
        subresource: Option<&str>,
    ) -> Shape {
        let mut shape = Shape {
            custom,
            ..Shape::default()
        };
        match (status_subresource, subresource) {
            (true, Some("status")) => shape.only = Some("status"),
            (true, _) => shape.reset.push("status"),
            _ => {}
        }
        match (group, resource) {
            ("", "namespaces") => shape.reset.extend(["spec", "status"]),
            // ObjectReference is an atomic struct.
            ("events.k8s.io", "events") => shape.atomic.extend(["regarding", "related"]),
            ("", "events") => shape.atomic.extend(["involvedObject", "related"]),
            _ => {}
        }
        shape
    }

    /// Whether a map created at `at` is owned itself.
    fn owns_map(&self, at: &Path) -> bool {
        match at.as_slice() {
            [] => false,
            [m] if m == "metadata" => false,
            [m, x] if m == "metadata" && (x == "labels" || x == "annotations") => true,
            [x] if !self.custom && (x == "data" || x == "binaryData") => true,
            _ => self.custom,
        }
    }

    fn tracks(&self, top: &str) -> bool {
        !self.reset.contains(&top) && self.only.is_none_or(|only| only == top)
    }

    /// Drops what this endpoint does not own from an apply's FieldsV1 set: identity metadata and
    /// reset fields.
    pub(crate) fn trim_applied(&self, fields: &mut Value) {
        if let Some(map) = fields.as_object_mut() {
            map.retain(|k, _| {
                let top = k.trim_start_matches("f:");
                k.starts_with("f:") && !matches!(top, "apiVersion" | "kind") && self.tracks(top)
            });
            if let Some(meta) = map.get_mut("f:metadata").and_then(Value::as_object_mut) {
                meta.retain(|k, _| !SYSTEM_METADATA.contains(&k.trim_start_matches("f:")));
                if meta.is_empty() {
                    map.remove("f:metadata");
                }
            }
        }
    }
}

/// Sorts managedFields entries as the API server does: `Apply` before `Update`, then by time
/// (to the second), manager, apiVersion and subresource.
pub(crate) fn sort_entries(entries: &mut [Value]) {
    let key = |e: &Value| {
        (
            entry_str(e, "operation").to_owned(),
            entry_str(e, "time").to_owned(),
            entry_str(e, "manager").to_owned(),
            entry_str(e, "apiVersion").to_owned(),
            entry_str(e, "subresource").to_owned(),
        )
    };
    entries.sort_by_key(key);
}

/// The leaf paths of a FieldsV1 set.
pub(crate) fn leaf_paths(fields: &Value) -> Vec<Path> {
    fn walk(v: &Value, prefix: &mut Path, out: &mut Vec<Path>) {
        let Some(map) = v.as_object() else { return };
        let children: Vec<(&String, &Value)> =
            map.iter().filter(|(k, _)| k.starts_with("f:")).collect();
        if children.is_empty() {
            // `{".": {}}` owns the map itself, not its contents: no leaf to conflict on.
            let map_only = !map.is_empty() && map.keys().all(|k| k == ".");
            if !prefix.is_empty() && !map_only {
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
    let key = key_of(first);
    let Some(map) = fields.as_object_mut() else {
        return false;
    };
    let Some(child) = map.get_mut(&key) else {
        return false;
    };
    // An empty set is a leaf: it covers every path below it.
    if rest.is_empty() || child.as_object().is_none_or(Map::is_empty) {
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
        // The real server's apply conflict names no object in its details, only the causes.
        if let Some(d) = err.details.as_mut() {
            d.name.clear();
            d.group.clear();
            d.kind.clear();
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

/// Paths whose value differs between `old` and `new`: `(set, removed)`, where `set` holds
/// paths added or changed in `new` (and, as [`RAW`] `.`, each map that only `new` has: the map
/// itself is owned too) and `removed` paths only `old` has. Lists are atomic leaves, except
/// `metadata.finalizers` (a set: one `v:"…"` per item) and `metadata.ownerReferences` (a map
/// keyed by uid of atomic items), as in the API server's schemas.
fn changed_paths(old: &Value, new: &Value, shape: &Shape) -> (Vec<Path>, Vec<Path>) {
    struct Walk<'a> {
        shape: &'a Shape,
        set: Vec<Path>,
        removed: Vec<Path>,
    }
    impl Walk<'_> {
        fn skip(&self, k: &str, at: &Path) -> bool {
            (at.is_empty() && (matches!(k, "apiVersion" | "kind") || !self.shape.tracks(k)))
                || (at.len() == 1 && at[0] == "metadata" && SYSTEM_METADATA.contains(&k))
        }

        fn atomic(&self, at: &Path) -> bool {
            at.len() == 1 && self.shape.atomic.contains(&at[0].as_str())
        }

        /// `metadata.finalizers` / `metadata.ownerReferences`: item keys and items.
        fn keyed_items<'v>(at: &Path, list: Option<&'v Value>) -> Option<Vec<(String, &'v Value)>> {
            let kind = match at.as_slice() {
                [m, f] if m == "metadata" && f == "finalizers" => "v",
                [m, o] if m == "metadata" && o == "ownerReferences" => "k",
                _ => return None,
            };
            let items = list
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            Some(
                items
                    .iter()
                    .map(|item| {
                        let key = match kind {
                            "v" => format!("v:{item}"),
                            _ => format!(
                                "k:{}",
                                serde_json::json!({"uid": item.get("uid").cloned().unwrap_or(Value::Null)})
                            ),
                        };
                        (raw(&key), item)
                    })
                    .collect(),
            )
        }

        fn walk(&mut self, old: Option<&Value>, new: Option<&Value>, at: &mut Path) {
            if let Some(new_items) = Self::keyed_items(at, new)
                && new.is_some()
            {
                let old_items = Self::keyed_items(at, old).unwrap_or_default();
                if old.is_none() && !new_items.is_empty() {
                    self.set.push([at.clone(), vec![raw(".")]].concat());
                }
                for (key, item) in &new_items {
                    if !old_items.iter().any(|(k, i)| k == key && i == item) {
                        self.set.push([at.clone(), vec![key.clone()]].concat());
                    }
                }
                for (key, _) in &old_items {
                    if !new_items.iter().any(|(k, _)| k == key) {
                        self.removed.push([at.clone(), vec![key.clone()]].concat());
                    }
                }
                return;
            }
            match (old, new) {
                (Some(Value::Object(o)), Some(Value::Object(n))) if !self.atomic(at) => {
                    for (k, nv) in n {
                        if self.skip(k, at) {
                            continue;
                        }
                        at.push(k.clone());
                        self.walk(o.get(k), Some(nv), at);
                        at.pop();
                    }
                    for (k, ov) in o {
                        if self.skip(k, at) || n.contains_key(k) {
                            continue;
                        }
                        at.push(k.clone());
                        self.walk(Some(ov), None, at);
                        at.pop();
                    }
                }
                (None, Some(Value::Object(n))) if !n.is_empty() && !self.atomic(at) => {
                    let before = self.set.len();
                    for (k, nv) in n {
                        if self.skip(k, at) {
                            continue;
                        }
                        at.push(k.clone());
                        self.walk(None, Some(nv), at);
                        at.pop();
                    }
                    // A new map below the root is owned itself (`.`) besides its fields.
                    if self.shape.owns_map(at) && self.set.len() > before {
                        self.set.push([at.clone(), vec![raw(".")]].concat());
                    }
                }
                (Some(_), None) => self.removed.push(at.clone()),
                (o, Some(n)) if o != Some(n) && !at.is_empty() => self.set.push(at.clone()),
                _ => {}
            }
        }
    }
    let mut walk = Walk {
        shape,
        set: Vec::new(),
        removed: Vec::new(),
    };
    walk.walk(Some(old), Some(new), &mut Vec::new());
    (walk.set, walk.removed)
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
            .entry(key_of(k))
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
    shape: &Shape,
    now: &str,
) {
    let empty = Value::Object(Map::new());
    let (set, removed) = changed_paths(old.unwrap_or(&empty), obj, shape);
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
    sort_entries(&mut entries);
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
            &Shape::of("", "configmaps", false, false, None),
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
            // A map the write created is owned itself too (`.`), as on the real server.
            json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:team": {}}}})
        );

        // Nothing changed: nothing recorded (no new timestamp, no write).
        let mut same = new.clone();
        record_update(
            Some(&new),
            &mut same,
            "other",
            None,
            &Shape::of("", "configmaps", false, false, None),
            "2027-01-01T00:00:00Z",
        );
        assert_eq!(same, new);

        // A status write is recorded per subresource; removing a field drops it everywhere.
        let mut status = new.clone();
        status["status"] = json!({"ready": true});
        record_update(
            Some(&new),
            &mut status,
            "kubectl-edit",
            Some("status"),
            &Shape::of("", "configmaps", false, false, None),
            "t",
        );
        let mut removal = status.clone();
        removal["data"].as_object_mut().unwrap().remove("b");
        record_update(
            Some(&status),
            &mut removal,
            "kubectl-edit",
            None,
            &Shape::of("", "configmaps", false, false, None),
            "t",
        );
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
        record_update(
            None,
            &mut obj,
            "creator",
            None,
            &Shape::of("", "configmaps", false, false, None),
            "t",
        );
        assert_eq!(
            obj["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {".": {}, "f:a": {}}})
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
