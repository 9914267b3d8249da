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
    /// The client asked for Tables (`kubectl get -w`): each event's object is a one-row
    /// Table, with the column definitions in the first event only, as from the real server.
    pub table: bool,
    /// The client asked for `PartialObjectMetadata` (kube's `watch_metadata`, client-go's
    /// metadata informers): each event's object is its metadata alone, as from the real server.
    pub metadata_only: bool,
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
    // `resume_rv` is where this stream stands in its type's history: a watcher that falls
    // behind the live channel resumes from there instead of ending.
    let (backlog, rx, mut resume_rv) = match since {
        Some(rv) => match store.type_history_since(&group, &resource, rv) {
            Ok((backlog, rx)) => (backlog, rx, rv),
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
            let (backlog, rx) = store.type_history_since(&group, &resource, rv)?;
            (backlog, rx, rv)
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
        // Objects of this resource are served as stored (all but events.k8s.io Events): an
        // event reported unchanged is the line serialised once for every watcher.
        let as_stored = crate::events::storage_of(&group, &resource).is_none();
        move |e: &crate::store::WatchEvent| -> Option<Bytes> {
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
            let line = |v: Value| Bytes::from(format!("{v}\n"));
            if as_stored {
                let now = selected(&q, &group, &resource, &e.object);
                let before = e
                    .previous
                    .as_ref()
                    .map(|p| selected(&q, &group, &resource, p));
                return match (before, now) {
                    (Some(false), true) => {
                        Some(line(json!({"type": "ADDED", "object": &*e.object})))
                    }
                    (Some(true), false) => {
                        let mut last = e.previous.as_deref().cloned().unwrap_or(Value::Null);
                        last["metadata"]["resourceVersion"] = json!(e.rv.to_string());
                        Some(line(json!({"type": "DELETED", "object": last})))
                    }
                    (_, true) => Some(e.line()),
                    (_, false) => None,
                };
            }
            let view = |o: &Value| crate::events::to_view(&group, &resource, o.clone());
            let object = view(&e.object);
            let previous = e.previous.as_deref().map(view);
            let now = selected(&q, &group, &resource, &object);
            let before = previous
                .as_ref()
                .map(|p| selected(&q, &group, &resource, p));
            match (before, now) {
                (Some(false), true) => Some(line(json!({"type": "ADDED", "object": object}))),
                (Some(true), false) => {
                    let mut last = previous.unwrap_or(Value::Null);
                    last["metadata"]["resourceVersion"] = json!(e.rv.to_string());
                    Some(line(json!({"type": "DELETED", "object": last})))
                }
                (_, true) => Some(line(json!({"type": e.kind, "object": object}))),
                (_, false) => None,
            }
        }
    };
    let mut last_rv = store.resource_version();
    let mut lines: Vec<Bytes> = initial
        .into_iter()
        .map(|v| Bytes::from(format!("{v}\n")))
        .collect();
    for e in backlog.iter() {
        last_rv = last_rv.max(e.rv);
        resume_rv = resume_rv.max(e.rv);
        if let Some(line) = project(e) {
            lines.push(line);
        }
    }
    if let Some(rv) = since {
        last_rv = last_rv.max(rv);
    }
    let first = futures::stream::iter(lines.into_iter().map(Ok::<_, std::io::Error>));
    let api_version = rt.api_version();
    let kind = rt.kind.clone();
    let bookmark = move |rv: u64| {
        json!({"type": "BOOKMARK", "object": {"apiVersion": api_version, "kind": kind,
            "metadata": {"resourceVersion": rv.to_string()}}})
    };
    let state = Stream {
        rx,
        store: store.clone(),
        group: group.clone(),
        pending: std::collections::VecDeque::new(),
        resume_rv,
        ended: false,
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
                if st.ended {
                    return None;
                }
                if let Some(e) = st.pending.pop_front() {
                    st.last_rv = st.last_rv.max(e.rv);
                    st.resume_rv = st.resume_rv.max(e.rv);
                    if let Some(line) = project(&e) {
                        return Some((Ok(line), (st, project, bookmark)));
                    }
                    continue;
                }
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
                            st.resume_rv = st.resume_rv.max(e.rv);
                            if let Some(line) = project(&e) {
                                return Some((Ok(line), (st, project, bookmark)));
                            }
                        }
                        // A watcher that fell behind the live channel catches up from the
                        // type's history; only when that no longer reaches back does it get
                        // 410 Gone (and re-lists), as from the real server's watch cache.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            match st.store.type_history_since(&st.group, &st.resource, st.resume_rv) {
                                Ok((missed, rx)) => {
                                    st.rx = rx;
                                    st.pending = missed.into();
                                }
                                Err(e) => {
                                    st.ended = true;
                                    let line = json!({"type": "ERROR", "object": e.to_status()});
                                    return Some((Ok(Bytes::from(format!("{line}\n"))), (st, project, bookmark)));
                                }
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
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
    let events = first.chain(rest);
    let body = match (options.table, options.metadata_only) {
        (false, false) => Body::from_stream(events),
        (false, true) => Body::from_stream(events.map(|line| line.map(as_partial_event))),
        (true, _) => {
            let (store, rt) = (store.clone(), rt.clone());
            let mut headers = true;
            Body::from_stream(events.map(move |line| {
                line.map(|bytes| as_table_event(&store, &rt, bytes, &mut headers))
            }))
        }
    };
    Ok(Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(body)
        .unwrap_or_else(|_| err_response(&ApiError::internal("building the watch response"))))
}

/// One watch line with its object as a Table row (ADDED, MODIFIED, DELETED; bookmarks and
/// errors pass as they are). After the first Table, `columnDefinitions` is null: the real
/// server prints headers once (`TableOptions.NoHeaders` on later events), and kubectl keeps
/// the first event's columns for every row.
fn as_table_event(store: &Store, rt: &ResourceType, line: Bytes, headers: &mut bool) -> Bytes {
    let Ok(mut event) = serde_json::from_slice::<Value>(&line) else {
        return line;
    };
    if !matches!(
        event["type"].as_str(),
        Some("ADDED" | "MODIFIED" | "DELETED")
    ) {
        return line;
    }
    let object = event["object"].take();
    let meta = json!({"resourceVersion": object.pointer("/metadata/resourceVersion")});
    let mut table = crate::table::render(store, rt, std::slice::from_ref(&object), meta);
    if !*headers {
        table["columnDefinitions"] = Value::Null;
    }
    *headers = false;
    event["object"] = table;
    Bytes::from(format!("{event}\n"))
}

/// One watch line with its object as a `PartialObjectMetadata` (bookmarks too, as the real
/// server converts every object of the stream; errors pass as they are).
fn as_partial_event(line: Bytes) -> Bytes {
    let Ok(mut event) = serde_json::from_slice::<Value>(&line) else {
        return line;
    };
    if event["type"] == "ERROR" {
        return line;
    }
    let object = event["object"].take();
    event["object"] = crate::partial::object(&object);
    Bytes::from(format!("{event}\n"))
}

/// The live part of a watch stream.
struct Stream {
    rx: tokio::sync::broadcast::Receiver<std::sync::Arc<crate::store::WatchEvent>>,
    store: Store,
    /// Group of the watched resource (with `resource`, what history to resume from).
    group: String,
    /// Events recovered from history after falling behind, delivered before the channel.
    pending: std::collections::VecDeque<std::sync::Arc<crate::store::WatchEvent>>,
    /// The newest resourceVersion of this type taken from the channel or history.
    resume_rv: u64,
    /// Set after a final ERROR line.
    ended: bool,
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
