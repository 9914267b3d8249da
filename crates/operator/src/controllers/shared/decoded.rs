//! Each kind's objects are cached as [`Cached`] values: decoded once, when the watch delivers
//! them, or kept as a small record of why they do not decode, so one object with bad stored
//! data cannot stall the watch of every other object of its kind.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::context::Context;
use super::error::Error;
use crate::api::Reason;
use crate::api::common::Condition;

/// The API resource of kind `K`.
pub(crate) fn api_resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// An object of kind `K` as a controller's watch caches it: decoded once, when it arrives, or,
/// when its stored data does not decode as `K` (it bypassed the CRD schema), what is needed to
/// report that on it. A watch of `K` itself would fail its whole list on one such object and
/// stall every other object of the kind; a watch of `DynamicObject`s decoded on every reconcile
/// held each object as a JSON tree, four times the memory of the typed object.
#[derive(Clone, Debug)]
pub(crate) enum Cached<K> {
    /// The object, decoded.
    Decoded(Arc<K>),
    /// An object whose stored data does not decode as `K`.
    Undecodable(Arc<Undecodable>),
}

/// What is kept of an object that does not decode as its kind: enough to report it.
#[derive(Clone, Debug)]
pub(crate) struct Undecodable {
    metadata: ObjectMeta,
    /// The stored `status` as it is, for the conditions already on it.
    status: Option<serde_json::Value>,
    /// Why it does not decode.
    error: String,
}

impl<K: Resource<DynamicType = ()>> Cached<K> {
    /// `obj`, decoded.
    pub(crate) fn new(obj: K) -> Self {
        Self::Decoded(Arc::new(obj))
    }
}

impl<K> Cached<K> {
    /// The object, if it decoded.
    pub(crate) fn decoded(&self) -> Option<&K> {
        match self {
            Self::Decoded(k) => Some(k),
            Self::Undecodable(_) => None,
        }
    }
}

impl Undecodable {
    /// Why the object does not decode.
    pub(crate) fn error(&self) -> &str {
        &self.error
    }
}

impl<K> Resource for Cached<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    type DynamicType = ();
    type Scope = K::Scope;

    /// A watch of `Cached<PartialObjectMeta<K>>` asks for metadata only, as one of
    /// `PartialObjectMeta<K>` does: the API server then sends no content.
    fn metadata_api() -> bool {
        K::metadata_api()
    }

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Decoded(k) => k.meta(),
            Self::Undecodable(u) => &u.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        // Only the watch mutates (to strip what no reconcile reads), before anything shares
        // the object, so neither branch copies.
        match self {
            Self::Decoded(k) => Arc::make_mut(k).meta_mut(),
            Self::Undecodable(u) => &mut Arc::make_mut(u).metadata,
        }
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Cached<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = serde_json::Value::deserialize(deserializer)?;
        match crate::api::decode::<K>(&value) {
            Ok(k) => Ok(Self::Decoded(Arc::new(k))),
            Err(err) => {
                let metadata = value
                    .get("metadata")
                    .map(ObjectMeta::deserialize)
                    .transpose()
                    .map_err(D::Error::custom)?
                    .unwrap_or_default();
                Ok(Self::Undecodable(Arc::new(Undecodable {
                    metadata,
                    status: value.get("status").cloned(),
                    error: err,
                })))
            }
        }
    }
}

/// A reference to the object `name` in `namespace` of kind `K`, for mappers.
pub(crate) fn cached_ref<K: Resource<DynamicType = ()> + Clone>(
    name: &str,
    namespace: Option<&str>,
) -> ObjectRef<Cached<K>> {
    let r = ObjectRef::new(name);
    match namespace {
        Some(ns) => r.within(ns),
        None => r,
    }
}

/// Pure: the conditions of an undecodable object (raw `status.conditions` if readable, with
/// `Ready=False` and `Stalled=True`, reason `InvalidObject`, upserted). `None` when nothing
/// would change.
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
    // Only fixing (or deleting) the object helps: kstatus reads it as stalled.
    let changed = super::status::set_standing(
        &mut conditions,
        super::status::Standing::Stalled,
        Reason::InvalidObject,
        message,
        generation,
        now,
    );
    changed.then_some(conditions)
}

/// Reports `bad`, the record of `obj`, on `obj` itself: `Ready=False` reason `InvalidObject`
/// and an Event, once.
pub(crate) async fn report_undecodable<K: Resource<DynamicType = ()> + Clone>(
    obj: &Cached<K>,
    bad: &Undecodable,
    ctx: &Context,
) -> Result<Action, Error> {
    let kind = K::kind(&());
    let name = bad.metadata.name.clone().unwrap_or_default();
    let namespace = bad.metadata.namespace.clone().unwrap_or_default();
    let message = format!(
        "stored {kind} cannot be decoded: {}; fix or delete the object",
        bad.error
    );
    tracing::warn!(kind = %kind, namespace = %namespace, name = %name, error = %bad.error, "undecodable object");
    if let Some(conditions) = invalid_object_conditions(
        bad.status.as_ref(),
        &message,
        bad.metadata.generation,
        ctx.clock.now(),
    ) {
        let ar = api_resource::<K>();
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ar);
        let patch = serde_json::json!({"status": {"conditions": conditions}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        ctx.event_for(
            obj.object_ref(&()),
            EventType::Warning,
            Reason::InvalidObject.as_str(),
            format!("Ready=False: {message}"),
        )
        .await;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::OmniCluster;
    use kube::ResourceExt as _;

    /// A watch of `Cached<PartialObjectMeta<K>>` asks for metadata only (kube reads the flag
    /// off the watched type); one of `Cached<K>` for whole objects.
    #[test]
    fn a_cached_partial_object_is_watched_by_its_metadata_alone() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::core::PartialObjectMeta;
        assert!(<Cached<PartialObjectMeta<ConfigMap>> as Resource>::metadata_api());
        assert!(!<Cached<ConfigMap> as Resource>::metadata_api());
    }

    fn bad_cluster() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "bad", "namespace": "ns", "generation": 2},
            "spec": {
                "connectionRef": {"name": "omni"},
                "kubernetes": {"version": 7},
                "talos": {"version": "v1.13.2"}
            },
            "status": {"conditions": [{
                "type": "Synced", "status": "True", "reason": "Synced", "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]}
        })
    }

    #[test]
    fn an_object_that_does_not_decode_is_cached_with_its_metadata_status_and_error() {
        let cached = Cached::<OmniCluster>::deserialize(bad_cluster())
            .unwrap_or_else(|e| panic!("an undecodable object must not fail the watch: {e}"));
        let Cached::Undecodable(bad) = &cached else {
            panic!("decoded a cluster whose kubernetes.version is a number: {cached:?}");
        };
        assert_eq!(cached.name_any(), "bad");
        assert_eq!(cached.namespace().as_deref(), Some("ns"));
        assert_eq!(bad.metadata.generation, Some(2));
        assert!(
            bad.error
                .starts_with("spec.kubernetes.version: invalid type"),
            "the message names the field: {}",
            bad.error
        );
        assert!(bad.error.contains("expected a string"), "{}", bad.error);
        assert!(bad.status.is_some());
    }

    #[test]
    fn an_object_that_decodes_is_cached_typed() {
        let mut good = bad_cluster();
        good["spec"]["kubernetes"]["version"] = "v1.35.0".into();
        let cached = Cached::<OmniCluster>::deserialize(good).unwrap_or_else(|e| panic!("{e}"));
        let Cached::Decoded(cluster) = cached else {
            panic!("a valid cluster must decode");
        };
        assert_eq!(cluster.spec.connection_ref.name, "omni");
    }

    #[test]
    fn undecodable_object_gets_invalid_object_condition_once() {
        let raw = bad_cluster();
        let now = jiff::Timestamp::UNIX_EPOCH;
        let conditions = invalid_object_conditions(raw.get("status"), "bad", Some(2), now)
            .unwrap_or_else(|| panic!("a first report must change the conditions"));
        let ready = conditions.iter().find(|c| c.type_ == "Ready");
        assert_eq!(
            ready.map(|c| c.reason.as_str()),
            Some(Reason::InvalidObject.as_str())
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
