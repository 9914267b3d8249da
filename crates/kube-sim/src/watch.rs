//! Watch streams: resourceVersion semantics, selectors, streaming lists, bookmarks,
//! `timeoutSeconds`, and the test hook that cuts open streams.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::hooks::Hooks;
use crate::selectors::selected;
use crate::server::{Target, err_response, json_response};
use crate::store::{ResourceType, Store};

/// How a watch stream is bounded and annotated.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WatchOptions {
    /// Interval of BOOKMARK events for clients that allow them.
    pub bookmark_interval: Duration,
}

pub(crate) fn watch(
    store: &Store,
    hooks: &Hooks,
    options: WatchOptions,
    rt: &ResourceType,
    t: &Target,
    ns: Option<&str>,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let timeout = match q.get("timeoutSeconds").map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(Duration::from_secs(s.parse::<u64>().map_err(|_| {
            ApiError::bad_request(&format!("invalid timeoutSeconds {s:?}"))
        })?)),
    };
    let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
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
    if since.is_some() && hooks.take_expired_resume(&t.resource) {
        let gone = ApiError::gone("too old resource version (kube-sim test hook)");
        return Ok(error_event(&gone));
    }
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
                if selected(q, &group, &resource, &o) {
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
    // What this watch reports for a store event, if anything. With a selector, an update
    // that moves an object into the selection is ADDED and one that moves it out is DELETED
    // (carrying its previous state at the new resourceVersion), as the real watch cache does.
    let project = {
        let (group, resource, ns) = (group.clone(), resource.clone(), ns.clone());
        let q = q.clone();
        // Events of both APIs are stored (and reported by the store) as core Events.
        let (stored_group, stored_resource) = crate::events::storage_of(&group, &resource)
            .map(|(g, r)| (g.to_owned(), r.to_owned()))
            .unwrap_or_else(|| (group.clone(), resource.clone()));
        move |e: &crate::store::WatchEvent| -> Option<Value> {
            let in_scope = e.group == stored_group
                && e.resource == stored_resource
                && ns.as_deref().is_none_or(|n| {
                    e.object
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        == Some(n)
                });
            if !in_scope {
                return None;
            }
            let view = |o: &Value| crate::events::to_view(&group, &resource, o.clone());
            let object = view(&e.object);
            let previous = e.previous.as_ref().map(view);
            let now = selected(&q, &group, &resource, &object);
            let before = previous
                .as_ref()
                .map(|p| selected(&q, &group, &resource, p));
            match (before, now) {
                (Some(false), true) => Some(json!({"type": "ADDED", "object": object})),
                (Some(true), false) => {
                    let mut last = previous.unwrap_or(Value::Null);
                    last["metadata"]["resourceVersion"] = json!(e.rv.to_string());
                    Some(json!({"type": "DELETED", "object": last}))
                }
                (_, true) => Some(json!({"type": e.kind, "object": object})),
                (_, false) => None,
            }
        }
    };
    let mut last_rv = store.resource_version();
    for e in backlog.iter() {
        last_rv = last_rv.max(e.rv);
        if let Some(line) = project(e) {
            initial.push(line);
        }
    }
    if let Some(rv) = since {
        last_rv = last_rv.max(rv);
    }
    let first = futures::stream::iter(
        initial
            .into_iter()
            .map(|v| Ok::<_, std::io::Error>(Bytes::from(format!("{v}\n")))),
    );
    let api_version = rt.api_version();
    let kind = rt.kind.clone();
    let bookmark = move |rv: u64| {
        json!({"type": "BOOKMARK", "object": {"apiVersion": api_version, "kind": kind,
            "metadata": {"resourceVersion": rv.to_string()}}})
    };
    let state = Stream {
        rx,
        cut: hooks.subscribe_cuts(),
        resource: resource.clone(),
        deadline: timeout.map(|t| tokio::time::Instant::now() + t),
        bookmarks: bookmarks.then(|| {
            let mut i = tokio::time::interval(options.bookmark_interval);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i.reset();
            i
        }),
        last_rv,
    };
    let rest = futures::stream::unfold(
        (state, project, bookmark),
        |(mut st, project, bookmark)| async move {
            loop {
                let deadline = async {
                    match st.deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                let tick = async {
                    match st.bookmarks.as_mut() {
                        Some(i) => {
                            i.tick().await;
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    event = st.rx.recv() => match event {
                        Ok(e) => {
                            st.last_rv = st.last_rv.max(e.rv);
                            if let Some(line) = project(&e) {
                                return Some((Ok(Bytes::from(format!("{line}\n"))), (st, project, bookmark)));
                            }
                        }
                        // A lagging watcher ends its stream; the client re-lists, as after a real
                        // server's timeout.
                        Err(_) => return None,
                    },
                    cut = st.cut.recv() => match cut {
                        Ok(Some(r)) if r != st.resource => {}
                        _ => return None,
                    },
                    () = deadline => return None,
                    () = tick => {
                        let line = bookmark(st.last_rv);
                        return Some((Ok(Bytes::from(format!("{line}\n"))), (st, project, bookmark)));
                    }
                }
            }
        },
    );
    use futures::StreamExt;
    let body = Body::from_stream(first.chain(rest));
    Ok(Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(body)
        .unwrap_or_else(|_| err_response(&ApiError::internal("building the watch response"))))
}

/// The live part of a watch stream.
struct Stream {
    rx: tokio::sync::broadcast::Receiver<crate::store::WatchEvent>,
    cut: tokio::sync::broadcast::Receiver<Option<String>>,
    resource: String,
    deadline: Option<tokio::time::Instant>,
    bookmarks: Option<tokio::time::Interval>,
    /// The newest resourceVersion this stream has seen (matching or not): a bookmark may
    /// promise no more than that.
    last_rv: u64,
}

/// A watch response holding one ERROR event, newline-terminated like every event of a real
/// server's stream.
fn error_event(e: &ApiError) -> Response {
    let line = json!({"type": "ERROR", "object": e.to_status()});
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(format!("{line}\n")))
        .unwrap_or_else(|_| err_response(&ApiError::internal("building the watch response")))
}
