//! Adding and removing the operator's finalizer with optimistic concurrency.
//!
//! kube-rs' `finalizer` helper knows one finalizer name; OmniConnection and OmniCluster must
//! also honour (and remove) the legacy one, so the few lines are written out here.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Error;
use crate::api::keys::{FINALIZER, LEGACY_FINALIZER};

/// Whether `obj` carries the current finalizer, or (when `legacy` is honoured) the legacy one.
pub(crate) fn has_finalizer<K: Resource>(obj: &K, legacy: bool) -> bool {
    obj.meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER || (legacy && f == LEGACY_FINALIZER))
}

/// Sets `obj`'s finalizers; the stored object after the write, or `None` when it is gone.
/// A concurrent change is refused (`resourceVersion`), so another controller's finalizer is
/// never dropped; the refusal hands the stored copy back as [`Error::StaleCache`].
async fn set_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<Option<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": obj.meta().resource_version,
        }
    });
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(stored) => Ok(Some(stored)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(&name).await? {
            Some(stored) => Err(Error::stale_cache(&stored)?),
            None => Ok(None),
        },
        Err(e) => Err(e.into()),
    }
}

/// Makes sure `obj` carries the current finalizer (or, when `legacy` is honoured, the legacy
/// one) before anything is done on its behalf. `false` when the object is gone.
///
/// When the finalizer had to be added, the pass ends with [`Error::StaleCache`] carrying the
/// stored object, and [`super::reconcile_decoded`] goes on from that copy at once. The watch
/// cache sees our own write only later: a pass started from the cache would find no finalizer,
/// try to add it again and be refused with `409 Conflict`, then wait out an error backoff.
pub async fn ensure<K>(api: &Api<K>, obj: &K, legacy: bool) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if has_finalizer(obj, legacy) {
        return Ok(true);
    }
    let mut list = obj.meta().finalizers.clone().unwrap_or_default();
    list.push(FINALIZER.to_string());
    match set_finalizers(api, obj, list).await? {
        Some(stored) => Err(Error::stale_cache(&stored)?),
        None => Ok(false),
    }
}

/// Removes the current finalizer and, when `legacy`, the legacy one, in one update.
/// A vanished object counts as success.
pub async fn remove<K>(api: &Api<K>, obj: &K, legacy: bool) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let list: Vec<String> = obj
        .meta()
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != FINALIZER && !(legacy && *f == LEGACY_FINALIZER))
        .cloned()
        .collect();
    set_finalizers(api, obj, list).await.map(drop)
}
