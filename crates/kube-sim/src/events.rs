//! Events are one stored resource served through two API groups, as on the real server:
//! core `v1` `events` and `events.k8s.io/v1` `events`. kube-sim stores every Event once, in
//! its core `v1` form (the real server keeps the internal type, which is the core shape), and
//! converts at the boundary:
//!
//! | events.k8s.io/v1           | core v1             |
//! |----------------------------|---------------------|
//! | `regarding`                | `involvedObject`    |
//! | `note`                     | `message`           |
//! | `reportingController`      | `reportingComponent`|
//! | `deprecatedSource`         | `source`            |
//! | `deprecatedFirstTimestamp` | `firstTimestamp`    |
//! | `deprecatedLastTimestamp`  | `lastTimestamp`     |
//! | `deprecatedCount`          | `count`             |
//!
//! Everything else (`metadata`, `reason`, `type`, `eventTime`, `series`, `action`, `related`,
//! `reportingInstance`) has the same name in both. Field selectors follow the real server's
//! field label tables: core accepts `involvedObject.*`, events.k8s.io the `regarding.*`
//! spellings, both `reason`, `type`, `source` and the reporting controller.

use serde_json::{Map, Value, json};

/// The group and resource under which objects requested as `group`/`resource` are stored,
/// when that differs (the resource is another API's view of the same objects).
pub(crate) fn storage_of(group: &str, resource: &str) -> Option<(&'static str, &'static str)> {
    (group == EVENTS_GROUP && resource == "events").then_some(("", "events"))
}

/// `events.k8s.io`.
pub(crate) const EVENTS_GROUP: &str = "events.k8s.io";

/// Field renames between events.k8s.io/v1 (left) and core v1 (right).
const RENAMES: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn is_core_events(group: &str, resource: &str) -> bool {
    group.is_empty() && resource == "events"
}

/// The stored (core v1) form of an object written through `group`/`resource`.
pub(crate) fn to_storage(group: &str, resource: &str, obj: Value) -> Value {
    if !obj.is_object() {
        return obj;
    }
    if storage_of(group, resource).is_some() {
        let mut core = rename(obj, Direction::ToCore);
        core["apiVersion"] = json!("v1");
        normalize_core(core)
    } else if is_core_events(group, resource) {
        normalize_core(obj)
    } else {
        obj
    }
}

/// A stored object as the client of `group`/`resource` sees it.
pub(crate) fn to_view(group: &str, resource: &str, obj: Value) -> Value {
    if storage_of(group, resource).is_none() || !obj.is_object() {
        return obj;
    }
    let mut view = rename(obj, Direction::ToEventsV1);
    view["apiVersion"] = json!(format!("{EVENTS_GROUP}/v1"));
    view["kind"] = json!("Event");
    // Go serializes these struct and time fields even when empty.
    if let Some(m) = view.as_object_mut() {
        m.entry("regarding").or_insert_with(|| json!({}));
        m.entry("deprecatedSource").or_insert_with(|| json!({}));
        m.entry("deprecatedFirstTimestamp").or_insert(Value::Null);
        m.entry("deprecatedLastTimestamp").or_insert(Value::Null);
        m.entry("eventTime").or_insert(Value::Null);
    }
    view
}

/// Core Events always carry `involvedObject`, `source` and the three timestamps (as `{}` and
/// `null` when unset), the way the real server serializes them.
fn normalize_core(mut obj: Value) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.entry("involvedObject").or_insert_with(|| json!({}));
        m.entry("source").or_insert_with(|| json!({}));
        m.entry("firstTimestamp").or_insert(Value::Null);
        m.entry("lastTimestamp").or_insert(Value::Null);
        m.entry("eventTime").or_insert(Value::Null);
    }
    obj
}

#[derive(Clone, Copy)]
enum Direction {
    ToCore,
    ToEventsV1,
}

impl Direction {
    /// `(from, to)` of a `(events.k8s.io, core)` rename pair.
    fn pick(self, (events_v1, core): (&'static str, &'static str)) -> (&'static str, &'static str) {
        match self {
            Direction::ToCore => (events_v1, core),
            Direction::ToEventsV1 => (core, events_v1),
        }
    }
}

/// Renames the top-level fields that differ between the two APIs.
fn rename(obj: Value, direction: Direction) -> Value {
    let Value::Object(fields) = obj else {
        return obj;
    };
    let mut out = Map::new();
    for (key, value) in fields {
        let renamed = RENAMES
            .iter()
            .map(|pair| direction.pick(*pair))
            .find(|(from, _)| *from == key)
            .map(|(_, to)| to);
        match renamed {
            Some(to) => {
                out.insert(to.to_owned(), value);
            }
            // A field in the other API's spelling is not a field of this version: the real
            // decoder drops it.
            None if RENAMES.iter().any(|pair| direction.pick(*pair).1 == key) => {}
            None => {
                out.insert(key, value);
            }
        }
    }
    Value::Object(out)
}

/// The value of field label `label` of `obj` (in the `group`/`resource` view) for a field
/// selector (`None`: unset, which selects as the empty string); `Err` when it is not a label
/// of the resource. Every type has `metadata.name` and `metadata.namespace`; Events have
/// their API's table.
pub(crate) fn field_label<'a>(
    group: &str,
    resource: &str,
    obj: &'a Value,
    label: &str,
) -> Result<Option<&'a str>, UnsupportedFieldLabel> {
    let at = |pointer: &str| obj.pointer(pointer).and_then(Value::as_str);
    let nonempty = |pointer: &str| at(pointer).filter(|s| !s.is_empty());
    match label {
        "metadata.name" => return Ok(at("/metadata/name")),
        "metadata.namespace" => return Ok(at("/metadata/namespace")),
        _ => {}
    }
    let reference = |prefix: &str, rest: &str| -> Result<Option<&'a str>, UnsupportedFieldLabel> {
        match rest {
            "kind" | "namespace" | "name" | "uid" | "apiVersion" | "resourceVersion"
            | "fieldPath" => Ok(obj
                .pointer(&format!("/{prefix}/{rest}"))
                .and_then(Value::as_str)),
            _ => Err(UnsupportedFieldLabel(label.to_owned())),
        }
    };
    if is_core_events(group, resource) {
        match label {
            "reason" => Ok(at("/reason")),
            "type" => Ok(at("/type")),
            "reportingComponent" => Ok(at("/reportingComponent")),
            "source" => Ok(nonempty("/source/component").or(at("/reportingComponent"))),
            _ => match label.strip_prefix("involvedObject.") {
                Some(rest) => reference("involvedObject", rest),
                None => Err(UnsupportedFieldLabel(label.to_owned())),
            },
        }
    } else if storage_of(group, resource).is_some() {
        match label {
            "reason" => Ok(at("/reason")),
            "type" => Ok(at("/type")),
            "reportingController" => Ok(at("/reportingController")),
            "source" => Ok(nonempty("/deprecatedSource/component").or(at("/reportingController"))),
            _ => match label.strip_prefix("regarding.") {
                Some(rest) => reference("regarding", rest),
                None => Err(UnsupportedFieldLabel(label.to_owned())),
            },
        }
    } else {
        Err(UnsupportedFieldLabel(label.to_owned()))
    }
}

/// Whether kube-sim knows every field label of `group`/`resource` (so an unknown one is a
/// 400, as on the real server).
pub(crate) fn has_field_labels(group: &str, resource: &str) -> bool {
    is_core_events(group, resource) || storage_of(group, resource).is_some()
}

/// A field selector named a field the resource cannot be selected by (400 on the real
/// server: `field label not supported: LABEL`).
#[derive(Debug, thiserror::Error)]
#[error("field label not supported: {0}")]
pub(crate) struct UnsupportedFieldLabel(pub(crate) String);

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "edge.1", "namespace": "ns"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "omni-operator", "reportingInstance": "omni-operator-0",
            "action": "Reconcile", "reason": "Ready", "type": "Normal",
            "note": "cluster is ready",
            "regarding": {"kind": "OmniCluster", "name": "edge", "namespace": "ns", "uid": "u1",
                "apiVersion": "omni.texashpc.com/v1alpha1"},
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
        })
    }

    #[test]
    fn an_events_v1_event_is_stored_in_the_core_shape() {
        let core = to_storage(EVENTS_GROUP, "events", recorder_event());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "edge");
        assert_eq!(core["message"], "cluster is ready");
        assert_eq!(core["reportingComponent"], "omni-operator");
        assert_eq!(core["reportingInstance"], "omni-operator-0");
        assert_eq!(core["series"]["count"], 2);
        assert_eq!(core["source"], json!({}));
        assert_eq!(core["firstTimestamp"], Value::Null);
        assert!(core.get("regarding").is_none() && core.get("note").is_none());
    }

    #[test]
    fn conversion_round_trips_both_ways() {
        let view = recorder_event();
        let back = to_view(
            EVENTS_GROUP,
            "events",
            to_storage(EVENTS_GROUP, "events", view),
        );
        for field in [
            "regarding",
            "note",
            "reportingController",
            "series",
            "eventTime",
        ] {
            assert_eq!(back[field], recorder_event()[field], "{field}");
        }
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "m",
            "source": {"component": "kubelet", "host": "n1"}, "count": 3,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z"});
        let view = to_view(EVENTS_GROUP, "events", to_storage("", "events", core));
        assert_eq!(view["deprecatedSource"]["component"], "kubelet");
        assert_eq!(view["deprecatedCount"], 3);
        assert_eq!(view["deprecatedLastTimestamp"], "2026-01-01T00:05:00Z");
        assert_eq!(view["eventTime"], Value::Null);
    }

    #[test]
    fn field_labels_follow_each_api_spelling() {
        let core = to_storage(EVENTS_GROUP, "events", recorder_event());
        assert_eq!(
            field_label("", "events", &core, "involvedObject.uid").unwrap(),
            Some("u1")
        );
        assert_eq!(
            field_label("", "events", &core, "source").unwrap(),
            Some("omni-operator")
        );
        assert!(field_label("", "events", &core, "regarding.name").is_err());
        let view = to_view(EVENTS_GROUP, "events", core);
        assert_eq!(
            field_label(EVENTS_GROUP, "events", &view, "regarding.kind").unwrap(),
            Some("OmniCluster")
        );
        assert!(field_label(EVENTS_GROUP, "events", &view, "involvedObject.name").is_err());
        let err = field_label("", "events", &view, "involvedObject.color").unwrap_err();
        assert_eq!(
            err.to_string(),
            "field label not supported: involvedObject.color"
        );
    }
}
