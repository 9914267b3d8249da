//! Server-side printing: `meta.k8s.io/v1` Table responses for clients that ask with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` (kubectl get does).
//!
//! Custom resources get their CRD version's `additionalPrinterColumns` (evaluated with the
//! JSONPath subset CRDs use: field paths, array indexes and `[?(@.key=="value")]` filters) after
//! `Name`, as the real server does; date columns are printed as ages. Built-in kinds get `Name`
//! and `Age` (the real server has richer per-kind columns).

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::store::{ResourceType, Store};

/// Whether the request asks for a Table (as its first choice).
pub(crate) fn wanted(headers: &HeaderMap) -> bool {
    crate::partial::requested_as(headers) == Some("Table")
}

/// The printer columns of `t`: `(name, type, jsonPath, description, priority)`.
fn columns(store: &Store, t: &ResourceType) -> Vec<(String, String, String, String, i64)> {
    let crd_columns = crate::crd::served_version(store, t)
        .and_then(|version| version.get("additionalPrinterColumns")?.as_array().cloned());
    match crd_columns {
        Some(cols) if !cols.is_empty() => cols
            .iter()
            .map(|c| {
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
                (
                    s("name"),
                    s("type"),
                    s("jsonPath"),
                    s("description"),
                    c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                )
            })
            .collect(),
        _ => vec![(
            "Age".into(),
            "date".into(),
            ".metadata.creationTimestamp".into(),
            "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
            0,
        )],
    }
}

/// The Table for `objects` of type `t`; `list_meta` is the list's metadata (resourceVersion,
/// continue).
pub(crate) fn render(
    store: &Store,
    t: &ResourceType,
    objects: &[Value],
    list_meta: Value,
) -> Value {
    if crate::events::has_field_labels(&t.group, &t.plural) {
        return event_table(t, objects, list_meta);
    }
    let cols = columns(store, t);
    let mut definitions = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace.",
    })];
    for (name, ty, _, description, priority) in &cols {
        definitions.push(json!({
            "name": name, "type": ty, "format": "", "description": description, "priority": priority,
        }));
    }
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = vec![o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
            for (_, ty, path, _, _) in &cols {
                let value = eval(o, path);
                cells.push(match (ty.as_str(), value) {
                    ("date", Some(Value::String(ts))) => ts
                        .parse::<jiff::Timestamp>()
                        .map(|at| json!(human_age(now.as_second() - at.as_second())))
                        .unwrap_or(Value::String(ts)),
                    (_, Some(v)) => v,
                    (_, None) => Value::Null,
                });
            }
            json!({
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// Events of either API print the real server's Event columns (`kubectl get events`): Last
/// Seen, Type, Reason, Object, Message, and with `-o wide` Subobject, Source, First Seen,
/// Count and Name.
fn event_table(t: &ResourceType, objects: &[Value], list_meta: Value) -> Value {
    let column = |name: &str, ty: &str, priority: i64, description: &str| {
        json!({"name": name, "type": ty, "format": if name == "Name" { "name" } else { "" },
            "priority": priority, "description": description})
    };
    let definitions = vec![
        column(
            "Last Seen",
            "string",
            0,
            "The time at which the most recent occurrence of this event was recorded.",
        ),
        column(
            "Type",
            "string",
            0,
            "Type of this event (Normal, Warning), new types could be added in the future",
        ),
        column(
            "Reason",
            "string",
            0,
            "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
        ),
        column(
            "Object",
            "string",
            0,
            "The object that this event is about.",
        ),
        column(
            "Subobject",
            "string",
            1,
            "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
        ),
        column(
            "Source",
            "string",
            1,
            "The component reporting this event. Should be a short machine understandable string.",
        ),
        column(
            "Message",
            "string",
            0,
            "A human-readable description of the status of this operation.",
        ),
        column(
            "First Seen",
            "string",
            1,
            "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
        ),
        column(
            "Count",
            "string",
            1,
            "The number of times this event has occurred.",
        ),
        column(
            "Name",
            "string",
            1,
            "Name must be unique within a namespace.",
        ),
    ];
    let now = jiff::Timestamp::now();
    let since = |ts: Option<&Value>| -> Option<String> {
        let at = ts?.as_str()?.parse::<jiff::Timestamp>().ok()?;
        Some(human_age(now.as_second() - at.as_second()))
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            // Printed from the stored (core) shape, whichever API asked.
            let e = crate::events::to_storage(&t.group, &t.plural, o.clone());
            let text = |p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let first = since(e.get("firstTimestamp"))
                .or_else(|| since(e.get("eventTime")))
                .unwrap_or_else(|| "<unknown>".to_owned());
            let mut last = since(e.get("lastTimestamp")).unwrap_or_else(|| first.clone());
            let mut count = e.get("count").and_then(Value::as_i64).unwrap_or(0);
            if let Some(series) = e.get("series").filter(|s| s.is_object()) {
                last =
                    since(series.get("lastObservedTime")).unwrap_or_else(|| "<unknown>".to_owned());
                count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
            } else if count == 0 {
                count = 1;
            }
            let kind = text("/involvedObject/kind").to_lowercase();
            let object = match text("/involvedObject/name") {
                "" => kind,
                name => format!("{kind}/{name}"),
            };
            let component = Some(text("/source/component"))
                .filter(|c| !c.is_empty())
                .unwrap_or(text("/reportingComponent"));
            let instance = Some(text("/source/host"))
                .filter(|h| !h.is_empty())
                .unwrap_or(text("/reportingInstance"));
            let source = if instance.is_empty() {
                component.to_owned()
            } else {
                format!("{component}, {instance}")
            };
            json!({
                "cells": [last, text("/type"), text("/reason"), object,
                    text("/involvedObject/fieldPath"), source, text("/message").trim(), first,
                    count, text("/metadata/name")],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// Evaluates a printer-column JSONPath: `.a.b`, `.a[0]`, `.a[?(@.k=="v")].b`. A filter yields
/// the first match, which is what a single table cell shows.
pub(crate) fn eval(obj: &Value, path: &str) -> Option<Value> {
    let mut current = obj.clone();
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    rest = rest.strip_prefix('.').unwrap_or(rest);
    while !rest.is_empty() {
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        let (field, after) = rest.split_at(end);
        if !field.is_empty() {
            current = current.get(field)?.clone();
        }
        rest = after;
        if let Some(bracket) = rest.strip_prefix('[') {
            let close = bracket.find(']')?;
            let inner = &bracket[..close];
            current = select(&current, inner)?;
            rest = &bracket[close + 1..];
        }
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    Some(current)
}

fn select(array: &Value, selector: &str) -> Option<Value> {
    let items = array.as_array()?;
    if let Ok(index) = selector.trim().parse::<usize>() {
        return items.get(index).cloned();
    }
    // ?(@.key=="value") or ?(@.key=='value')
    let cond = selector.trim().strip_prefix("?(")?.strip_suffix(')')?;
    let (lhs, rhs) = cond.split_once("==")?;
    let key = lhs.trim().strip_prefix("@.")?;
    let want = rhs.trim().trim_matches('"').trim_matches('\'');
    items
        .iter()
        .find(|item| {
            eval(item, key).is_some_and(|v| match v {
                Value::String(s) => s == want,
                other => other == *want,
            })
        })
        .cloned()
}

/// An age the way the API server prints one (`45s`, `3m20s`, `15m`, `2h5m`, `30h`, `3d4h`,
/// `40d`, `2y3d`). Like apimachinery's `HumanDuration`, a time more than a second in the future
/// is `<invalid>` (clock skew of one second still reads `0s`).
pub(crate) fn human_age(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match () {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 && s % 60 != 0 => format!("{m}m{}s", s % 60),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 && m % 60 != 0 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if h < 192 && h % 24 != 0 => format!("{d}d{}h", h % 24),
        _ if d < 730 => format!("{d}d"),
        _ => format!("{}y{}d", d / 365, d % 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_column_paths_evaluate_like_the_api_server() {
        let obj = json!({"spec": {"chart": {"chart": "demo"}, "items": [{"x": 1}]},
            "status": {"conditions": [
                {"type": "Accepted", "status": "True", "reason": "Accepted"},
                {"type": "Ready", "status": "False", "reason": "SyncFailed"}]}});
        assert_eq!(eval(&obj, ".spec.chart.chart"), Some(json!("demo")));
        assert_eq!(eval(&obj, ".spec.items[0].x"), Some(json!(1)));
        assert_eq!(
            eval(&obj, r#".status.conditions[?(@.type=="Ready")].reason"#),
            Some(json!("SyncFailed"))
        );
        assert_eq!(
            eval(&obj, r#".status.conditions[?(@.type=="Gone")].reason"#),
            None
        );
        assert_eq!(eval(&obj, ".status.missing"), None);
    }

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(200), "3m20s");
        assert_eq!(human_age(900), "15m");
        assert_eq!(human_age(3 * 3600 + 300), "3h5m");
        assert_eq!(human_age(30 * 3600), "30h");
        assert_eq!(human_age(3 * 86400 + 4 * 3600), "3d4h");
        assert_eq!(human_age(40 * 86400), "40d");
        assert_eq!(human_age(-1), "0s");
        assert_eq!(human_age(-3600), "<invalid>");
    }

    #[test]
    fn only_table_first_requests_get_tables() {
        let mut h = HeaderMap::new();
        h.insert(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert!(wanted(&h));
        h.insert("accept", "application/json".parse().unwrap());
        assert!(!wanted(&h));
    }
}
