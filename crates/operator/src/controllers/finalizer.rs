//! Adding and removing the operator's finalizer with optimistic concurrency.
//!
//! kube-rs' `finalizer` helper knows one finalizer name; OmniConnection and OmniCluster must
//! also honour (and remove) the legacy one, so the few lines are written out here.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::Error;
use crate::api::{FINALIZER, LEGACY_FINALIZER};

/// Whether `obj` carries the current finalizer, or (when `legacy` is honoured) the legacy one.
pub fn has_finalizer<K: Resource>(obj: &K, legacy: bool) -> bool {
    obj.meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER || (legacy && f == LEGACY_FINALIZER))
}

async fn set_finalizers<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    // resourceVersion makes the patch fail on a concurrent change instead of dropping
    // another controller's finalizer.
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
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Adds the current finalizer.
pub async fn add<K>(api: &Api<K>, obj: &K) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut list = obj.meta().finalizers.clone().unwrap_or_default();
    list.push(FINALIZER.to_string());
    set_finalizers(api, obj, list).await
}

/// Removes the current finalizer and, when `legacy`, the legacy one, in one update.
/// A vanished object counts as success.
pub async fn remove<K>(api: &Api<K>, obj: &K, legacy: bool) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let list: Vec<String> = obj
        .meta()
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != FINALIZER && !(legacy && *f == LEGACY_FINALIZER))
        .cloned()
        .collect();
    set_finalizers(api, obj, list).await
}
