//! Writing `status` through the status subresource, only when it changed.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::Error;
use crate::api::common::Condition;

/// Conditions of `new` whose status or reason differs from `old` (or that are new).
pub fn transitions<'a>(old: &[Condition], new: &'a [Condition]) -> Vec<&'a Condition> {
    new.iter()
        .filter(|c| {
            old.iter()
                .find(|o| o.type_ == c.type_)
                .is_none_or(|o| o.status != c.status || o.reason != c.reason)
        })
        .collect()
}

/// Status fields that record *when* something was tried rather than *what* happened. A change
/// of these alone is not worth a write: a failing object retried with backoff would otherwise
/// rewrite its status on every attempt. They are written along with any real change.
pub const TIMESTAMP_ONLY_FIELDS: &[&str] = &["lastAttemptTime"];

/// Whether `old` and `new` differ in more than the [`TIMESTAMP_ONLY_FIELDS`].
fn differs_beyond_timestamps(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !TIMESTAMP_ONLY_FIELDS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    };
    strip(old) != strip(new)
}

/// The JSON merge patch turning status `old` into `new`: changed and new fields are set,
/// fields absent from `new` are nulled (merge-patch deletion) at every depth, since a merge
/// patch merges nested objects rather than replacing them. `None` when they are equal or
/// differ only in [`TIMESTAMP_ONLY_FIELDS`].
pub fn status_patch(old: &Value, new: &Value) -> Option<Value> {
    if !differs_beyond_timestamps(old, new) {
        return None;
    }
    let empty = Value::Object(Map::new());
    let new = if new.is_object() { new } else { &empty };
    Some(serde_json::json!({ "status": merge_patch(old, new) }))
}

/// The merge patch from `old` to `new` (RFC 7386): objects are diffed key by key, recursively,
/// with removed keys nulled; anything else is replaced whole.
fn merge_patch(old: &Value, new: &Value) -> Value {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return new.clone();
    };
    let mut patch = Map::new();
    for (key, value) in new {
        match old.get(key) {
            Some(before) if before == value => {}
            Some(before) if before.is_object() && value.is_object() => {
                patch.insert(key.clone(), merge_patch(before, value));
            }
            _ => {
                patch.insert(key.clone(), value.clone());
            }
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    Value::Object(patch)
}

/// Writes `new_status` if it differs from the status stored in `obj`. Returns whether a
/// write happened.
///
/// `obj` comes from the watch cache, which can lag behind the server (a watcher backing off
/// after cut streams or `410 Gone` can stay seconds behind). A status computed from a stale
/// copy would rewrite what a previous reconcile already wrote, with fresh transition times.
/// So a needed write is first checked against the server's copy: when that is newer,
/// nothing is written and [`Error::StaleCache`] hands it to the caller to reconcile again on
/// ([`super::reconcile_decoded`] does). The write itself carries the checked `resourceVersion`, so
/// a change landing in between is refused with `409 Conflict` rather than overwritten, and
/// handled like a stale cache.
pub async fn write<K, S>(api: &Api<K>, obj: &K, new_status: &S) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    S: Serialize,
{
    let object = serde_json::to_value(obj)?;
    let current = object
        .get("status")
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    let kind = object["kind"].as_str().unwrap_or_default();
    let desired = crate::baseline::stamp_status(kind, serde_json::to_value(new_status)?);
    let Some(mut patch) = status_patch(&current, &desired) else {
        return Ok(false);
    };
    let name = obj.meta().name.clone().unwrap_or_default();
    let cached = obj.meta().resource_version.clone();
    let stored = api.get(&name).await?;
    if stored.meta().resource_version != cached {
        return Err(Error::stale_cache(&stored)?);
    }
    if let Some(rv) = cached {
        patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        // Another writer landed between the check and the write: the same as a stale cache.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(Error::stale_cache(&api.get(&name).await?)?)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::ConditionStatus;
    use serde_json::json;

    fn cond(type_: &str, status: ConditionStatus, reason: &str) -> Condition {
        Condition::new(
            type_,
            status,
            reason,
            "m",
            Some(1),
            jiff::Timestamp::UNIX_EPOCH,
        )
    }

    #[test]
    fn equal_status_needs_no_write() {
        let s = json!({"observedGeneration": 1, "conditions": []});
        assert_eq!(status_patch(&s, &s.clone()), None);
    }

    #[test]
    fn a_new_attempt_time_alone_needs_no_write() {
        let old = json!({"observedGeneration": 1, "lastAttemptTime": "2026-01-01T00:00:00Z"});
        let retried = json!({"observedGeneration": 1, "lastAttemptTime": "2026-01-01T00:05:00Z"});
        assert_eq!(status_patch(&old, &retried), None);
        let first = json!({"observedGeneration": 1});
        assert_eq!(
            status_patch(&first, &retried),
            None,
            "recording the first attempt time alone is no change either"
        );
    }

    #[test]
    fn an_attempt_time_is_written_with_a_real_change() {
        let old = json!({"observedGeneration": 1, "lastAttemptTime": "2026-01-01T00:00:00Z"});
        let new = json!({"observedGeneration": 2, "lastAttemptTime": "2026-01-01T00:05:00Z"});
        assert_eq!(
            status_patch(&old, &new),
            Some(
                json!({"status": {"observedGeneration": 2, "lastAttemptTime": "2026-01-01T00:05:00Z"}})
            )
        );
    }

    /// A merge patch merges nested objects: a field removed inside one must be nulled there.
    /// Before, only top-level fields were, so `manifests.lastError` outlived the error.
    #[test]
    fn fields_removed_inside_nested_objects_are_nulled() {
        let old = json!({"manifests": {"applied": 1, "lastError": "boom"}, "phase": "RUNNING"});
        let new = json!({"manifests": {"applied": 2}, "phase": "RUNNING"});
        assert_eq!(
            status_patch(&old, &new),
            Some(json!({"status": {"manifests": {"applied": 2, "lastError": null}}}))
        );
    }

    #[test]
    fn removed_fields_are_nulled() {
        let old = json!({"observedGeneration": 1, "endpoint": "x"});
        let new = json!({"observedGeneration": 2});
        assert_eq!(
            status_patch(&old, &new),
            Some(json!({"status": {"observedGeneration": 2, "endpoint": null}}))
        );
    }

    #[test]
    fn transitions_report_status_and_reason_changes_only() {
        let old = vec![
            cond("Ready", ConditionStatus::False, "SyncFailed"),
            cond("Synced", ConditionStatus::True, "Synced"),
        ];
        let mut new = old.clone();
        new[0] = cond("Ready", ConditionStatus::True, "Synced");
        new[1].message = "other".into();
        new.push(cond("Validated", ConditionStatus::True, "Validated"));
        let t: Vec<&str> = transitions(&old, &new)
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(t, vec!["Ready", "Validated"]);
    }
}
