//! Built-in defaulting and CustomResourceDefinition registration (Established/NamesAccepted).

use serde_json::{Value, json};

use crate::error::{ApiError, Cause};
use crate::store::{ResourceType, Store};

/// Built-in defaulting and the checks of their registry strategies that kube-sim emulates:
/// Secrets (`stringData` folds into base64 `data`, `type` defaults to `Opaque`, cannot change and
/// requires its keys) and Namespaces (the `kubernetes.io/metadata.name` label, always set).
pub(crate) fn default_builtin(
    group: &str,
    resource: &str,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    match (group, resource) {
        ("", "secrets") => default_secret(obj, old),
        ("", "namespaces") => {
            if let Some(name) = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_owned)
            {
                obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn required(field: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: "Required value".into(),
        field: field.into(),
    }
}

/// The keys a Secret of a well-known `type` must hold, as the API server checks them.
fn secret_type_causes(obj: &Value) -> Vec<Cause> {
    let data = obj.get("data").and_then(Value::as_object);
    let has = |key: &str| data.is_some_and(|d| d.contains_key(key));
    let missing = |keys: &[&str]| -> Vec<Cause> {
        keys.iter()
            .filter(|k| !has(k))
            .map(|k| required(&format!("data[{k}]")))
            .collect()
    };
    match obj.get("type").and_then(Value::as_str).unwrap_or_default() {
        "kubernetes.io/tls" => missing(&["tls.crt", "tls.key"]),
        "kubernetes.io/dockerconfigjson" => missing(&[".dockerconfigjson"]),
        "kubernetes.io/dockercfg" => missing(&[".dockercfg"]),
        "kubernetes.io/ssh-auth" => missing(&["ssh-privatekey"]),
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            missing(&["username", "password"])
        }
        _ => Vec::new(),
    }
}

fn default_secret(obj: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    use base64::Engine;
    if let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData"))
        && let Some(sd) = sd.as_object()
    {
        for (k, v) in sd {
            let enc =
                base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap_or_default());
            obj["data"][k] = json!(enc);
        }
    }
    if obj.get("type").is_none_or(Value::is_null) {
        obj["type"] = json!("Opaque");
    }
    let mut causes = Vec::new();
    if let Some(old) = old
        && old.get("type") != obj.get("type")
    {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: {}: field is immutable",
                obj.get("type").cloned().unwrap_or(Value::Null)
            ),
            field: "type".into(),
        });
    }
    causes.extend(secret_type_causes(obj));
    if causes.is_empty() {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    Err(ApiError::invalid("", "Secret", name, causes))
}

/// A created CustomResourceDefinition starts serving its resource and
/// reports `NamesAccepted` and `Established`.
pub(crate) fn crd_established(
    store: &Store,
    group: &str,
    resource: &str,
    crd: Value,
) -> Result<Value, ApiError> {
    if !(group == "apiextensions.k8s.io" && resource == "customresourcedefinitions") {
        return Ok(crd);
    }
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let s = |p: &str| {
        spec.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (g, kind, plural) = (s("/group"), s("/names/kind"), s("/names/plural"));
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let served = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .or_else(|| {
            versions
                .iter()
                .find(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        });
    let Some(version) = served else {
        return Ok(crd);
    };
    let mut rt = ResourceType::new(
        &g,
        version.get("name").and_then(Value::as_str).unwrap_or("v1"),
        &plural,
        &kind,
        spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
    );
    if let Some(singular) = spec.pointer("/names/singular").and_then(Value::as_str) {
        rt.singular = singular.to_string();
    }
    rt.short_names = spec
        .pointer("/names/shortNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    rt.categories = spec
        .pointer("/names/categories")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    rt.status_subresource = version.pointer("/subresources/status").is_some();
    store.register(rt);
    let mut with_status = crd.clone();
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    with_status["status"] = json!({
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": spec.get("names").cloned().unwrap_or(Value::Null),
        "storedVersions": [version.get("name").cloned().unwrap_or(Value::Null)],
    });
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    store.update(group, resource, None, &name, with_status)
}

/// Whether a stored CustomResourceDefinition serves `group`/`plural` (without copying it).
pub(crate) fn serves(store: &Store, group: &str, plural: &str) -> bool {
    store
        .list_shared("apiextensions.k8s.io", "customresourcedefinitions", None)
        .iter()
        .any(|c| {
            c.pointer("/spec/group").and_then(Value::as_str) == Some(group)
                && c.pointer("/spec/names/plural").and_then(Value::as_str) == Some(plural)
        })
}

/// The entry of `spec.versions` of the CRD serving `t`, when `t` is a custom resource.
pub(crate) fn served_version(store: &Store, t: &ResourceType) -> Option<Value> {
    store
        .crd_version(t)
        .map(|v| std::sync::Arc::unwrap_or_clone(v.version))
}

/// A `Warning` for each `x-kubernetes-validations` rule of a CRD being written that kube-sim's
/// CEL subset cannot evaluate (the real server would evaluate it; kube-sim would not): such a
/// rule is visible at once, and the differential test fails on the extra warning.
pub(crate) fn unevaluated_rule_warnings(group: &str, resource: &str, crd: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for rule in map
                    .get("x-kubernetes-validations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.get("rule").and_then(Value::as_str))
                {
                    if !crate::cel::supported(rule) {
                        out.push(format!(
                            "kube-sim: x-kubernetes-validations rule outside its CEL subset, not evaluated: {rule}"
                        ));
                    }
                }
                map.values().for_each(|child| walk(child, out));
            }
            Value::Array(items) => items.iter().for_each(|item| walk(item, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if group == "apiextensions.k8s.io" && resource == "customresourcedefinitions" {
        walk(crd.get("spec").unwrap_or(&Value::Null), &mut out);
    }
    out
}
