//! OpenAPI v3 documents: `/openapi/v3` (the index of group-versions) and one document per
//! group-version, generated from the registered types.
//!
//! Clients read these for two things, and both are served faithfully:
//! - **which query parameters a write accepts**: client-go (kubectl, helm) looks for the
//!   `fieldValidation` parameter on a kind's PATCH operation to decide between server-side
//!   and client-side validation, and fails ("failed to download openapi") when no document
//!   exists;
//! - **the schema of each kind**, found by its `x-kubernetes-group-version-kind` extension
//!   (`kubectl explain`, client-side validation, apply). Custom resources get the
//!   `openAPIV3Schema` of their CRD version; built-in kinds get `apiVersion`, `kind` and
//!   `metadata` with everything else preserved as unknown fields, because kube-sim stores
//!   built-ins as schemaless JSON.
//!
//! Documents are JSON only; a client asking for protobuf gets JSON with its real content type
//! (client-go accepts that for v3). `/openapi/v2` is in `openapi_v2.rs`.

use std::collections::BTreeMap;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::store::{ResourceType, Store};

/// Answers `/openapi/v3` and `/openapi/v3/{api/v1|apis/GROUP/VERSION}`; `None` for other paths.
pub(crate) fn serve(store: &Store, path: &str) -> Option<Response> {
    let rest = path.strip_prefix("/openapi/v3")?;
    let rest = rest.trim_matches('/');
    let groups = group_versions(store);
    if rest.is_empty() {
        let mut paths = Map::new();
        for (key, types) in &groups {
            let doc = group_version_document(store, key, types);
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", hash(&doc))}),
            );
        }
        return Some(json_doc(&json!({ "paths": paths })));
    }
    let types = groups.get(rest)?;
    Some(json_doc(&group_version_document(store, rest, types)))
}

fn json_doc(doc: &Value) -> Response {
    let mut resp = doc.to_string().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Upper-case hex SHA-512 of the document, the form the real server puts in `?hash=`.
fn hash(doc: &Value) -> String {
    let digest = Sha512::digest(doc.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02X}")).collect()
}

/// Registered types grouped by their document key: `api/v1` or `apis/GROUP/VERSION`.
fn group_versions(store: &Store) -> BTreeMap<String, Vec<ResourceType>> {
    let mut out: BTreeMap<String, Vec<ResourceType>> = BTreeMap::new();
    for t in store.types() {
        let key = if t.group.is_empty() {
            format!("api/{}", t.version)
        } else {
            format!("apis/{}/{}", t.group, t.version)
        };
        out.entry(key).or_default().push(t);
    }
    out
}

/// The schema name the real server uses: the Go package path reversed, then version and kind.
fn schema_name(t: &ResourceType) -> String {
    let prefix = match t.group.as_str() {
        "" => "io.k8s.api.core".to_owned(),
        "apiextensions.k8s.io" => {
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_owned()
        }
        g if g.ends_with(".k8s.io") => {
            format!("io.k8s.api.{}", g.split('.').next().unwrap_or(g))
        }
        g if !g.contains('.') => format!("io.k8s.api.{g}"),
        g => g.split('.').rev().collect::<Vec<_>>().join("."),
    };
    format!("{prefix}.{}.{}", t.version, t.kind)
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

fn gvk(t: &ResourceType) -> Value {
    json!([{"group": t.group, "version": t.version, "kind": t.kind}])
}

fn kind_schema(store: &Store, t: &ResourceType) -> Value {
    let mut schema = crate::schema::crd_schema(store, t).unwrap_or_else(|| {
        json!({
            "type": "object",
            "description": format!("{} (kube-sim stores this built-in kind without a schema).", t.kind),
            "x-kubernetes-preserve-unknown-fields": true,
        })
    });
    if let Some(obj) = schema.as_object_mut() {
        let props = obj
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(props) = props {
            props.insert(
                "apiVersion".into(),
                json!({"type": "string", "description": "Versioned schema of this object."}),
            );
            props.insert(
                "kind".into(),
                json!({"type": "string", "description": "REST resource this object represents."}),
            );
            props.insert(
                "metadata".into(),
                json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "default": {}}),
            );
        }
        obj.insert("x-kubernetes-group-version-kind".into(), gvk(t));
    }
    schema
}

/// Query parameters of a PATCH; `fieldValidation` is what client-go probes for.
fn patch_parameters() -> Value {
    json!([
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
    ])
}

fn operation(t: &ResourceType, action: &str, op_id: String, schema_ref: &str) -> Value {
    let mut op = json!({
        "operationId": op_id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version, "kind": t.kind},
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}},
    });
    if matches!(action, "patch" | "put" | "post") {
        op["parameters"] = patch_parameters();
    }
    op
}

fn group_version_document(store: &Store, key: &str, types: &[ResourceType]) -> Value {
    let mut schemas = Map::new();
    schemas.insert(
        OBJECT_META.into(),
        json!({
            "type": "object",
            "description": "Standard object metadata.",
            "properties": {
                "name": {"type": "string"}, "generateName": {"type": "string"},
                "namespace": {"type": "string"}, "uid": {"type": "string"},
                "resourceVersion": {"type": "string"}, "generation": {"type": "integer", "format": "int64"},
                "creationTimestamp": {"type": "string", "format": "date-time"},
                "deletionTimestamp": {"type": "string", "format": "date-time"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": {"type": "array", "items": {"type": "string"}},
                "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            },
        }),
    );
    let mut paths = Map::new();
    for t in types {
        let name = schema_name(t);
        let schema_ref = format!("#/components/schemas/{name}");
        schemas.insert(name, kind_schema(store, t));
        let base = if t.namespaced {
            format!("/{key}/namespaces/{{namespace}}/{}", t.plural)
        } else {
            format!("/{key}/{}", t.plural)
        };
        let id = |verb: &str| format!("{verb}{}", t.kind);
        paths.insert(
            base.clone(),
            json!({
                "get": operation(t, "list", id("list"), &schema_ref),
                "post": operation(t, "post", id("create"), &schema_ref),
                "delete": operation(t, "deletecollection", id("deleteCollection"), &schema_ref),
            }),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({
                "get": operation(t, "get", id("read"), &schema_ref),
                "put": operation(t, "put", id("replace"), &schema_ref),
                "patch": operation(t, "patch", id("patch"), &schema_ref),
                "delete": operation(t, "delete", id("delete"), &schema_ref),
            }),
        );
        if t.status_subresource {
            paths.insert(
                format!("{base}/{{name}}/status"),
                json!({
                    "get": operation(t, "get", id("readStatus"), &schema_ref),
                    "put": operation(t, "put", id("replaceStatus"), &schema_ref),
                    "patch": operation(t, "patch", id("patchStatus"), &schema_ref),
                }),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_follow_the_go_package_paths() {
        let core = ResourceType::new("", "v1", "configmaps", "ConfigMap", true);
        assert_eq!(schema_name(&core), "io.k8s.api.core.v1.ConfigMap");
        let rbac = ResourceType::new("rbac.authorization.k8s.io", "v1", "roles", "Role", true);
        assert_eq!(schema_name(&rbac), "io.k8s.api.rbac.v1.Role");
        let apps = ResourceType::new("apps", "v1", "deployments", "Deployment", true);
        assert_eq!(schema_name(&apps), "io.k8s.api.apps.v1.Deployment");
        let cr = ResourceType::new(
            "omni.texashpc.com",
            "v1alpha1",
            "omniclusters",
            "OmniCluster",
            true,
        );
        assert_eq!(schema_name(&cr), "com.texashpc.omni.v1alpha1.OmniCluster");
    }

    #[test]
    fn patch_operations_advertise_field_validation() {
        let t = ResourceType::new("", "v1", "configmaps", "ConfigMap", true);
        let store = Store::new(16);
        let doc = group_version_document(&store, "api/v1", std::slice::from_ref(&t));
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"fieldValidation"), "{names:?}");
        let schema = &doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"][0]["kind"],
            "ConfigMap"
        );
    }
}
