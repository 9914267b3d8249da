//! Live-object drift of a Helm release, the pure part: the release's manifest as objects, the
//! body a server-side apply of one of them sends (what Helm itself applies), the comparison of
//! the API server's dry-run answer with the live object, and the JSON patch that puts only the
//! differing fields back.
//!
//! The comparison is the one Flux's helm-controller makes: the API server applies the
//! manifest's object to the live one without persisting it (`dryRun=All`, field manager
//! `helm`, forced), and any field where its answer differs from the live object is drift. The
//! server does the defaulting, quantity normalisation and list merging, so a field the chart
//! does not set, or a value written in another spelling, is no drift.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Helm's field manager: server-side applies of the release's objects go under its name.
pub(crate) const FIELD_MANAGER: &str = "helm";

/// At most this many drifted fields are named per object (the status stays bounded).
pub(crate) const FIELDS_LISTED: usize = 10;

/// One object of a release manifest.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ManifestObject {
    /// `apiVersion`, e.g. `apps/v1`.
    pub(crate) api_version: String,
    /// `kind`.
    pub(crate) kind: String,
    /// `metadata.name`.
    pub(crate) name: String,
    /// `metadata.namespace` when the chart sets it.
    pub(crate) namespace: Option<String>,
    /// The whole object as rendered.
    pub(crate) body: Value,
}

impl ManifestObject {
    /// `Kind namespace/name` (or `Kind name`), for messages.
    pub(crate) fn describe(&self, namespace: &str) -> String {
        if namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {namespace}/{}", self.kind, self.name)
        }
    }
}

/// The objects of `manifest` (`helm get manifest`: YAML documents); documents without a kind
/// or name (comments, empty documents) are skipped.
pub(crate) fn parse_manifest(manifest: &str) -> Result<Vec<ManifestObject>, String> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(manifest)
        .map_err(|e| format!("the release manifest is not YAML: {e}"))?;
    Ok(documents
        .into_iter()
        .filter_map(|body| {
            let text = |pointer: &str| {
                body.pointer(pointer)
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            Some(ManifestObject {
                api_version: text("/apiVersion")?,
                kind: text("/kind")?,
                name: text("/metadata/name")?,
                namespace: text("/metadata/namespace"),
                body,
            })
        })
        .collect())
}

/// What Helm applies for `object` of release `release` in `release_namespace`: the rendered
/// object with the ownership metadata Helm adds to everything it creates, in `namespace` when
/// the kind is namespaced. A server-side apply by Helm's field manager that left these out
/// would remove them.
pub(crate) fn apply_body(
    object: &ManifestObject,
    namespace: Option<&str>,
    release: &str,
    release_namespace: &str,
) -> Value {
    let mut body = object.body.clone();
    let metadata = body.as_object_mut().map(|o| {
        o.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
    });
    if let Some(Value::Object(meta)) = metadata {
        match namespace {
            Some(ns) => {
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            }
            None => {
                meta.remove("namespace");
            }
        }
        let mut insert = |field: &str, key: &str, value: &str| {
            let map = meta
                .entry(field)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(key.to_string(), Value::String(value.to_string()));
            }
        };
        insert("labels", "app.kubernetes.io/managed-by", "Helm");
        insert("annotations", "meta.helm.sh/release-name", release);
        insert(
            "annotations",
            "meta.helm.sh/release-namespace",
            release_namespace,
        );
    }
    body
}

/// `value` without what every write moves and nobody declares: the server's bookkeeping in
/// `metadata` and the whole `status`.
fn comparable(value: &Value) -> Value {
    let mut value = value.clone();
    if let Some(o) = value.as_object_mut() {
        o.remove("status");
        if let Some(Value::Object(meta)) = o.get_mut("metadata") {
            for field in [
                "managedFields",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "uid",
                "selfLink",
            ] {
                meta.remove(field);
            }
        }
    }
    value
}

/// Removes the field at JSON pointer `pointer` from `value`, if it is there.
fn remove_pointer(value: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let last = unescape(last);
    match value.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last);
        }
        Some(Value::Array(items)) => {
            if let Ok(i) = last.parse::<usize>()
                && i < items.len()
            {
                items.remove(i);
            }
        }
        _ => {}
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The JSON pointers where `desired` (the dry-run answer) and `live` differ, leaving out the
/// server's bookkeeping and the `ignore`d fields. Objects are compared key by key, anything
/// else (lists included) as a whole.
pub(crate) fn differences(desired: &Value, live: &Value, ignore: &[String]) -> Vec<String> {
    let (mut desired, mut live) = (comparable(desired), comparable(live));
    for pointer in ignore {
        remove_pointer(&mut desired, pointer);
        remove_pointer(&mut live, pointer);
    }
    let mut out = Vec::new();
    diff_into(&desired, &live, String::new(), &mut out);
    out
}

fn diff_into(desired: &Value, live: &Value, at: String, out: &mut Vec<String>) {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => {
            let keys: std::collections::BTreeSet<&String> = d.keys().chain(l.keys()).collect();
            for key in keys {
                let here = format!("{at}/{}", escape(key));
                match (d.get(key), l.get(key)) {
                    (Some(a), Some(b)) => diff_into(a, b, here, out),
                    _ => out.push(here),
                }
            }
        }
        (a, b) if a == b => {}
        _ => out.push(at),
    }
}

/// The JSON merge patch (RFC 7386) that puts the `fields` of `live` back to their `desired`
/// values (a field `desired` lacks is removed), refused by the server should the object change
/// meanwhile: it names the live `resourceVersion`. Lists differ as a whole, so a merge patch,
/// which replaces lists, is exact.
pub(crate) fn correction(desired: &Value, live: &Value, fields: &[String]) -> Value {
    let mut patch = Value::Object(Map::new());
    if let Some(rv) = live.pointer("/metadata/resourceVersion") {
        set_path(
            &mut patch,
            &["metadata".into(), "resourceVersion".into()],
            rv.clone(),
        );
    }
    for field in fields {
        let tokens: Vec<String> = field.split('/').skip(1).map(unescape).collect();
        let value = desired.pointer(field).cloned().unwrap_or(Value::Null);
        set_path(&mut patch, &tokens, value);
    }
    patch
}

/// Sets `value` at `tokens` in the object `patch`, making the objects on the way.
fn set_path(patch: &mut Value, tokens: &[String], value: Value) {
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut at = patch;
    for token in parents {
        let Value::Object(map) = at else {
            return;
        };
        at = map
            .entry(token.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if let Value::Object(map) = at {
        map.insert(last.clone(), value);
    }
}

/// Which objects an ignore rule applies to (`spec.driftDetection.ignore[].target`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Target {
    /// Kind, when the rule names one.
    pub(crate) kind: Option<String>,
    /// Name, when the rule names one.
    pub(crate) name: Option<String>,
    /// Namespace, when the rule names one.
    pub(crate) namespace: Option<String>,
    /// Labels the object must match, when the rule has a selector.
    pub(crate) selector: Option<crate::api::label_selector::LabelSelector>,
}

impl Target {
    /// Whether the object `kind` `namespace/name` with `labels` is one of the rule's.
    pub(crate) fn selects(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        self.kind.as_deref().is_none_or(|k| k == kind)
            && self.name.as_deref().is_none_or(|n| n == name)
            && self.namespace.as_deref().is_none_or(|n| n == namespace)
            && self.selector.as_ref().is_none_or(|s| s.matches(labels))
    }
}

/// The labels of `object` (its `metadata.labels`).
pub(crate) fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MANIFEST: &str = "---\n# Source: demo/templates/configmap.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-config\ndata:\n  greeting: \"hi\"\n---\n# Source: demo/templates/deployment.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: demo-app\n  namespace: apps\nspec:\n  replicas: 2\n";

    #[test]
    fn a_manifest_becomes_its_objects() {
        let objects = parse_manifest(MANIFEST).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<(&str, &str, Option<&str>)> = objects
            .iter()
            .map(|o| (o.kind.as_str(), o.name.as_str(), o.namespace.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("ConfigMap", "demo-config", None),
                ("Deployment", "demo-app", Some("apps"))
            ]
        );
        assert_eq!(objects[1].describe("apps"), "Deployment apps/demo-app");
        assert!(parse_manifest("").unwrap_or_default().is_empty());
        assert!(parse_manifest("a: [").is_err());
    }

    #[test]
    fn the_apply_body_carries_helms_ownership_metadata() {
        let objects = parse_manifest(MANIFEST).unwrap_or_else(|e| panic!("{e}"));
        let body = apply_body(&objects[0], Some("default"), "demo", "default");
        assert_eq!(body["metadata"]["namespace"], "default");
        assert_eq!(
            body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
        assert_eq!(
            body["metadata"]["annotations"]["meta.helm.sh/release-name"],
            "demo"
        );
        assert_eq!(
            body["metadata"]["annotations"]["meta.helm.sh/release-namespace"],
            "default"
        );
        let cluster_scoped = apply_body(&objects[1], None, "demo", "default");
        assert!(cluster_scoped["metadata"].get("namespace").is_none());
    }

    #[test]
    fn differences_leave_out_bookkeeping_and_ignored_fields() {
        let live = json!({
            "metadata": {"name": "d", "resourceVersion": "9", "generation": 2, "labels": {"a": "1"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"replicas": 3, "template": {"containers": [{"name": "c", "image": "v1"}]}},
            "status": {"readyReplicas": 3}
        });
        let desired = json!({
            "metadata": {"name": "d", "resourceVersion": "9", "generation": 3, "labels": {"a": "1", "b/c": "2"}},
            "spec": {"replicas": 2, "template": {"containers": [{"name": "c", "image": "v2"}]}},
        });
        assert_eq!(
            differences(&desired, &live, &[]),
            [
                "/metadata/labels/b~1c",
                "/spec/replicas",
                "/spec/template/containers"
            ]
        );
        assert_eq!(
            differences(
                &desired,
                &live,
                &["/spec/replicas".into(), "/metadata/labels/b~1c".into()]
            ),
            ["/spec/template/containers"]
        );
        assert!(differences(&live, &live, &[]).is_empty());
    }

    #[test]
    fn the_correction_patches_only_the_drifted_fields_of_that_version() {
        let live =
            json!({"metadata": {"resourceVersion": "9"}, "spec": {"replicas": 3, "extra": 1}});
        let desired = json!({"metadata": {"resourceVersion": "9", "labels": {"a/b": "x"}},
                             "spec": {"replicas": 2, "paused": false}});
        let fields = [
            "/spec/replicas".to_string(),
            "/spec/paused".into(),
            "/spec/extra".into(),
            "/metadata/labels/a~1b".into(),
        ];
        assert_eq!(
            correction(&desired, &live, &fields),
            json!({
                "metadata": {"resourceVersion": "9", "labels": {"a/b": "x"}},
                "spec": {"replicas": 2, "paused": false, "extra": null},
            })
        );
    }

    #[test]
    fn a_target_selects_by_every_field_it_names() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let any = Target::default();
        assert!(any.selects("Deployment", "apps", "web", &labels));
        let named = Target {
            kind: Some("Deployment".into()),
            name: Some("web".into()),
            ..Target::default()
        };
        assert!(named.selects("Deployment", "apps", "web", &labels));
        assert!(!named.selects("ConfigMap", "apps", "web", &labels));
        let selected = Target {
            selector: crate::api::label_selector::LabelSelector::parse("app=db").ok(),
            ..Target::default()
        };
        assert!(!selected.selects("Deployment", "apps", "web", &labels));
        assert_eq!(
            labels_of(&json!({"metadata": {"labels": {"app": "web"}}})),
            labels
        );
    }
}
