//! Watch streams: resourceVersion semantics, selectors and streaming lists.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::selectors::selected;
use crate::server::{Target, err_response, json_response};
use crate::store::{ResourceType, Store};

pub(crate) fn watch(
    store: &Store,
    rt: &ResourceType,
    t: &Target,
    ns: Option<&str>,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let since = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(&format!("invalid resourceVersion {s:?}")))?,
        ),
    };
    let (group, resource) = (t.group.clone(), t.resource.clone());
    let ns = ns.map(str::to_string);
    let mut initial: Vec<Value> = Vec::new();
    let initial_events = q.get("sendInitialEvents").map(String::as_str) == Some("true");
    let since = if initial_events { None } else { since };
    let (backlog, rx) = match since {
        Some(rv) => match store.history_since(rv) {
            Ok(x) => x,
            Err(e) => {
                let line = json!({"type": "ERROR", "object": e.to_status()});
                return Ok(json_response(200, &line));
            }
        },
        None => {
            let rv = store.resource_version();
            for o in store.list_objects(&group, &resource, ns.as_deref()) {
                if selected(q, &o) {
                    initial.push(json!({"type": "ADDED", "object": o}));
                }
            }
            if initial_events {
                // Streaming list: the end of the initial state is marked by a bookmark
                // carrying the `k8s.io/initial-events-end` annotation.
                let api_version = if rt.group.is_empty() {
                    rt.version.clone()
                } else {
                    format!("{}/{}", rt.group, rt.version)
                };
                initial.push(json!({"type": "BOOKMARK", "object": {
                    "apiVersion": api_version, "kind": rt.kind,
                    "metadata": {"resourceVersion": rv.to_string(),
                        "annotations": {"k8s.io/initial-events-end": "true"}}}}));
            }
            store.history_since(rv)?
        }
    };
    let matches = {
        let (group, resource, ns) = (group.clone(), resource.clone(), ns.clone());
        let q = q.clone();
        move |e: &crate::store::WatchEvent| {
            selected(&q, &e.object)
                && e.group == group
                && e.resource == resource
                && ns.as_deref().is_none_or(|n| {
                    e.object
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        == Some(n)
                })
        }
    };
    for e in backlog.iter().filter(|e| matches(e)) {
        initial.push(json!({"type": e.kind, "object": e.object}));
    }
    let first = futures::stream::iter(
        initial
            .into_iter()
            .map(|v| Ok::<_, std::io::Error>(Bytes::from(format!("{v}\n")))),
    );
    let rest = futures::stream::unfold((rx, matches), |(mut rx, matches)| async move {
        loop {
            match rx.recv().await {
                Ok(e) if matches(&e) => {
                    let line = json!({"type": e.kind, "object": e.object});
                    return Some((Ok(Bytes::from(format!("{line}\n"))), (rx, matches)));
                }
                Ok(_) => continue,
                // A lagging watcher ends its stream; the client re-lists, as after a real server's timeout.
                Err(_) => return None,
            }
        }
    });
    use futures::StreamExt;
    let body = Body::from_stream(first.chain(rest));
    Ok(Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(body)
        .unwrap_or_else(|_| err_response(&ApiError::internal("building the watch response"))))
}
