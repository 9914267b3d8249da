//! Discovery and health endpoints: `/healthz`, `/readyz`, `/livez`, `/version`, `/api`,
//! `/apis` and the per-group/per-version resource lists kubectl and client-go read.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::server::json_response;
use crate::store::{ResourceType, Store};

/// Answers a non-resource request (health, version, discovery), or `None` when `path` is a
/// resource path for the REST handler.
pub(crate) fn serve(store: &Store, path: &str, headers: &HeaderMap) -> Option<Response> {
    match path {
        "/healthz" | "/readyz" | "/livez" => return Some((StatusCode::OK, "ok").into_response()),
        "/version" => {
            return Some(json_response(
                200,
                &json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0", "platform": "linux/amd64"}),
            ));
        }
        "/api" => {
            return Some(json_response(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            ));
        }
        "/apis" => return Some(json_response(200, &api_group_list(store))),
        _ => {}
    }
    if path == "/openapi/v2" {
        return Some(crate::openapi_v2::serve(store, headers));
    }
    if path.starts_with("/openapi/") {
        return Some(crate::openapi::serve(store, path).unwrap_or_else(|| {
            json_response(
                404,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": "the server could not find the requested resource",
                        "reason": "NotFound", "details": {}, "code": 404}),
            )
        }));
    }
    discovery(store, path).map(|doc| json_response(200, &doc))
}

/// `/api/v1`, `/apis/{group}` and `/apis/{group}/{version}` documents.
fn discovery(store: &Store, path: &str) -> Option<Value> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version) = match parts.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g] => {
            let t = store.types().into_iter().find(|t| t.group == *g)?;
            let gv =
                json!({"groupVersion": format!("{}/{}", t.group, t.version), "version": t.version});
            return Some(
                json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": [gv.clone()], "preferredVersion": gv}),
            );
        }
        ["apis", g, v] => (*g, *v),
        _ => return None,
    };
    let types: Vec<ResourceType> = store
        .types()
        .into_iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for t in &types {
        resources.push(json!({
            "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": t.short_names,
            "categories": t.categories,
        }));
        if t.status_subresource {
            resources.push(json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn api_group_list(store: &Store) -> Value {
    let mut groups: Vec<(String, String)> = store
        .types()
        .into_iter()
        .filter(|t| !t.group.is_empty())
        .map(|t| (t.group, t.version))
        .collect();
    groups.sort();
    groups.dedup();
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, v)| {
            let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
            json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}
