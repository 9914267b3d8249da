//! Adding and removing the operator's finalizers with optimistic concurrency: the one on the
//! operator's own objects, and the holds it puts on Secrets.
//!
//! kube-rs' `finalizer` helper knows one finalizer name; OmniConnection and OmniCluster must
//! also honour (and remove) the legacy one, so the few lines are written out here.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{Error, PassError};
use crate::api::keys::{FINALIZER, LEGACY_FINALIZER};

/// Which of the operator's finalizers a kind carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finalizer {
    /// None: nothing outside the object is the operator's to clean up (the child kinds).
    None,
    /// [`FINALIZER`].
    Current,
    /// [`FINALIZER`], and the original operator's [`LEGACY_FINALIZER`] is honoured and
    /// removed with it.
    CurrentOrLegacy,
}

/// Whether `obj` carries the finalizer `which` (the current one, or the legacy one when that
/// is honoured).
pub(crate) fn has_finalizer<K: Resource>(obj: &K, which: Finalizer) -> bool {
    let legacy = which == Finalizer::CurrentOrLegacy;
    which != Finalizer::None
        && obj
            .meta()
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER || (legacy && f == LEGACY_FINALIZER))
}

/// Sets `obj`'s finalizers; the stored object after the write, or `None` when it is gone.
/// A concurrent change is refused (`resourceVersion`), so another controller's finalizer is
/// never dropped; the refusal hands the stored copy back as [`PassError::Stale`].
async fn set_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<Option<K>, PassError<K>>
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
            Some(stored) => Err(PassError::stale(stored)),
            None => Ok(None),
        },
        Err(e) => Err(e.into()),
    }
}

/// Makes sure `obj` carries the finalizer `which` before anything is done on its behalf.
/// `false` when the object is gone.
///
/// When the finalizer had to be added, the pass ends with [`PassError::Stale`] carrying the
/// stored object, and the pass goes on from that copy at once. The watch cache sees our own
/// write only later: a pass started from the cache would find no finalizer, try to add it
/// again and be refused with `409 Conflict`, then wait out an error backoff.
pub(crate) async fn ensure<K>(api: &Api<K>, obj: &K, which: Finalizer) -> Result<bool, PassError<K>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if which == Finalizer::None || has_finalizer(obj, which) {
        return Ok(true);
    }
    let mut list = obj.meta().finalizers.clone().unwrap_or_default();
    list.push(FINALIZER.to_string());
    match set_finalizers(api, obj, list).await? {
        Some(stored) => Err(PassError::stale(stored)),
        None => Ok(false),
    }
}

/// Removes the finalizer `which` (the current one and, when honoured, the legacy one) in one
/// update. A vanished object counts as success.
pub(crate) async fn remove<K>(api: &Api<K>, obj: &K, which: Finalizer) -> Result<(), PassError<K>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let legacy = which == Finalizer::CurrentOrLegacy;
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

/// Changes the finalizers of the Secret `secret` to `finalizers`, conditional on the
/// resourceVersion it was read at (a concurrent change fails the patch instead of dropping
/// someone's finalizer). A Secret gone meanwhile counts as success.
pub(crate) async fn set_secret_finalizers(
    api: &Api<Secret>,
    secret: &ObjectMeta,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": secret.resource_version,
        }
    });
    match api
        .patch(
            secret.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
