//! Each kind's objects are watched as `DynamicObject`s and decoded per reconcile, so one object
//! with bad stored data cannot stall the watch of every other object of its kind.

use std::future::Future;
use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{Context, Error};
use crate::api::common::{Condition, ConditionStatus};

/// How many times in a row one reconcile goes on from a newer stored copy
/// ([`Error::StaleCache`]) before leaving the object to the error backoff: adding the
/// finalizer takes one, a status write racing another writer one more.
const STALE_CACHE_RERUNS: usize = 3;

/// Condition reason for an object whose stored data does not decode as its kind.
pub(crate) const REASON_INVALID_OBJECT: &str = "InvalidObject";

/// The API resource of kind `K` (the dynamic type of its `DynamicObject` watch).
pub fn api_resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Decodes a watched `DynamicObject` as kind `K`.
pub fn decode<K: DeserializeOwned>(obj: &DynamicObject) -> Result<K, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(obj)?)
}

/// A reference to the object `name` in `namespace` of kind `K`, for mappers.
pub(crate) fn dyn_ref<K: Resource<DynamicType = ()>>(
    name: &str,
    namespace: Option<&str>,
) -> ObjectRef<DynamicObject> {
    let r = ObjectRef::new_with(name, api_resource::<K>());
    match namespace {
        Some(ns) => r.within(ns),
        None => r,
    }
}

/// Pure: the conditions of an undecodable object (raw `status.conditions` if readable, with
/// `Ready=False` reason `InvalidObject` upserted). `None` when nothing would change.
pub(crate) fn invalid_object_conditions(
    raw_status: Option<&serde_json::Value>,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Option<Vec<Condition>> {
    let mut conditions: Vec<Condition> = raw_status
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let changed = crate::api::common::set_condition(
        &mut conditions,
        Condition::new(
            "Ready",
            ConditionStatus::False,
            REASON_INVALID_OBJECT,
            message,
            generation,
            now,
        ),
    );
    changed.then_some(conditions)
}

/// Decodes `obj` as `K` and runs `inner`; an undecodable object gets a condition and an Event
/// instead and is left alone until it changes.
pub async fn reconcile_decoded<K, F, Fut>(
    obj: Arc<DynamicObject>,
    ctx: Arc<Context>,
    inner: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut + Copy,
    Fut: Future<Output = Result<Action, Error>>,
{
    let mut obj = obj;
    let mut reruns = 0;
    let err = loop {
        let k = match decode::<K>(&obj) {
            Ok(k) => k,
            Err(e) => break e,
        };
        match inner(Arc::new(k), ctx.clone()).await {
            // The watch cache lagged behind the server (or has not seen our own write yet):
            // go on from the server's copy, rather than waiting for the cache (its watcher may
            // be backing off) or a backoff.
            Err(Error::StaleCache(stored)) if reruns < STALE_CACHE_RERUNS => {
                reruns += 1;
                obj = Arc::new(serde_json::from_value(*stored)?);
            }
            other => return other,
        }
    };
    let kind = K::kind(&());
    let name = obj.name_any();
    let namespace = obj.namespace().unwrap_or_default();
    let message = format!("stored {kind} cannot be decoded: {err}; fix or delete the object");
    tracing::warn!(kind = %kind, namespace = %namespace, name = %name, error = %err, "undecodable object");
    let status = obj.data.get("status");
    if let Some(conditions) =
        invalid_object_conditions(status, &message, obj.metadata.generation, ctx.clock.now())
    {
        let ar = api_resource::<K>();
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ar);
        let patch = serde_json::json!({"status": {"conditions": conditions}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        ctx.event_for(
            obj.object_ref(&ar),
            EventType::Warning,
            REASON_INVALID_OBJECT,
            format!("Ready=False: {message}"),
        )
        .await;
    }
    Ok(Action::await_change())
}

/// The error policy of every controller: retry with per-object exponential backoff.
pub(crate) fn error_policy_dyn(obj: Arc<DynamicObject>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = format!(
        "{}/{}/{}",
        obj.types
            .as_ref()
            .map(|t| t.kind.as_str())
            .unwrap_or_default(),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    let delay = ctx.backoff(&key);
    tracing::warn!(object = %key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecodable_object_gets_invalid_object_condition_once() {
        let raw: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "bad", "namespace": "ns", "generation": 2},
            "spec": {"connectionRef": {"name": "omni"}, "kubernetes": {"version": 7}},
            "status": {"conditions": [{
                "type": "Synced", "status": "True", "reason": "Synced", "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(decode::<crate::api::OmniCluster>(&raw).is_err());
        let now = jiff::Timestamp::UNIX_EPOCH;
        let conditions = invalid_object_conditions(raw.data.get("status"), "bad", Some(2), now)
            .unwrap_or_else(|| panic!("a first report must change the conditions"));
        let ready = conditions.iter().find(|c| c.type_ == "Ready");
        assert_eq!(
            ready.map(|c| c.reason.as_str()),
            Some(REASON_INVALID_OBJECT)
        );
        assert!(
            conditions.iter().any(|c| c.type_ == "Synced"),
            "other conditions are kept"
        );
        let stored = serde_json::json!({ "conditions": conditions });
        assert_eq!(
            invalid_object_conditions(Some(&stored), "bad", Some(2), now),
            None,
            "a second reconcile of the same bad object writes nothing"
        );
    }
}
