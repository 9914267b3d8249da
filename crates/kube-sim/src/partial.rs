//! Metadata-only responses: `meta.k8s.io/v1` `PartialObjectMetadata` for a get and
//! `PartialObjectMetadataList` for a list, for clients that ask with
//! `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1` (kube's
//! `get_metadata`/`list_metadata`, client-go's metadata client). The real server answers these
//! with each object's `metadata` alone, so a client listing many large objects (Secrets) for
//! their finalizers or labels does not receive their data.
//!
//! [`requested_as`] reads which `meta.k8s.io` representation a request asks for; `table.rs`
//! uses it too.

use axum::http::HeaderMap;
use serde_json::{Value, json};

/// The `meta.k8s.io` representation (`as=`: `Table`, `PartialObjectMetadata`,
/// `PartialObjectMetadataList`) the request asks for as its first choice, if any.
pub(crate) fn requested_as(headers: &HeaderMap) -> Option<&str> {
    let first = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .and_then(|accept| accept.split(',').next())?;
    // The media type, then its parameters.
    let params: Vec<&str> = first.split(';').skip(1).map(str::trim).collect();
    if !params.contains(&"g=meta.k8s.io") {
        return None;
    }
    params.iter().find_map(|p| p.strip_prefix("as="))
}

/// The metadata-only kind the request asks for as its first choice, if any.
pub(crate) fn wanted(headers: &HeaderMap) -> Option<&str> {
    requested_as(headers)
        .filter(|kind| matches!(*kind, "PartialObjectMetadata" | "PartialObjectMetadataList"))
}

/// `obj` as a `PartialObjectMetadata`.
pub(crate) fn object(obj: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// `objects` as a `PartialObjectMetadataList` with the list's `metadata`.
pub(crate) fn list<'a>(objects: impl Iterator<Item = &'a Value>, meta: Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadataList",
        "metadata": meta,
        "items": objects.map(object).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "accept",
            value.parse().unwrap_or_else(|e| panic!("header: {e}")),
        );
        headers
    }

    #[test]
    fn the_first_accepted_type_decides() {
        assert_eq!(
            wanted(&accept(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            )),
            Some("PartialObjectMetadataList")
        );
        assert_eq!(
            wanted(&accept(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
            )),
            Some("PartialObjectMetadata")
        );
        assert_eq!(
            wanted(&accept(
                "application/json,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
            )),
            None
        );
        assert_eq!(wanted(&accept("application/json")), None);
    }

    #[test]
    fn only_the_metadata_is_kept() {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "finalizers": ["f"]},
            "data": {"k": "c2VjcmV0"}
        });
        let listed = list(std::iter::once(&secret), json!({"resourceVersion": "7"}));
        assert_eq!(
            listed,
            json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadataList",
                "metadata": {"resourceVersion": "7"},
                "items": [{
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadata",
                    "metadata": {"name": "s", "finalizers": ["f"]}
                }]
            })
        );
    }
}
