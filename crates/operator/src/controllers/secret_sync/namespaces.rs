//! `targetSecretRef.namespaceSelector`: the copy in every workload namespace whose labels
//! match, and none of this sync's copies anywhere else.
//!
//! A pass lists the workload cluster's Namespaces and this sync's copies (one list each, by
//! the sync's UID label), so an idle pass costs two reads and no write. A matching namespace
//! without a copy of ours is read once more by name: a Secret of that name that the operator
//! did not create is left alone and reported (`TargetNotOwned`, naming it). New and
//! relabelled namespaces are found by the periodic re-check (`--secret-sync-resync-interval`),
//! not by a watch per workload cluster (docs/decisions.md).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::failure::{SecretSyncFailure, Spread, workload_failed};
use super::target::{Content, desired_target};
use super::write::{converge, delete_owned};
use crate::api::OmniSecretSync;
use crate::api::keys::SECRET_SYNC_UID_LABEL;
use crate::api::secret_sync::NamespaceSelector;

/// The names of the workload namespaces `selector` matches, not being deleted, sorted.
async fn matching(
    workload: &kube::Client,
    selector: &NamespaceSelector,
) -> Result<Vec<String>, SecretSyncFailure> {
    let listed = Api::<Namespace>::all(workload.clone())
        .list(&ListParams::default())
        .await
        .map_err(workload_failed("list workload namespaces".to_string()))?;
    let mut names: Vec<String> = listed
        .items
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none() && selector.matches(n.labels()))
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    Ok(names)
}

/// Every copy this sync owns in the workload cluster, whatever its namespace and name.
async fn our_copies(
    workload: &kube::Client,
    sync: &OmniSecretSync,
) -> Result<Vec<Secret>, SecretSyncFailure> {
    let Some(uid) = sync.metadata.uid.as_deref().filter(|u| !u.is_empty()) else {
        return Ok(Vec::new());
    };
    let listed = Api::<Secret>::all(workload.clone())
        .list(&ListParams::default().labels(&format!("{SECRET_SYNC_UID_LABEL}={uid}")))
        .await
        .map_err(workload_failed(
            "list the workload Secrets of this sync".to_string(),
        ))?;
    Ok(listed.items)
}

/// The copy of `content` in every namespace `selector` matches; this sync's copies elsewhere
/// (or under another name) removed.
pub(super) async fn sync_selected(
    workload: &kube::Client,
    sync: &OmniSecretSync,
    content: &Content,
    cluster_name: &str,
    selector: &NamespaceSelector,
) -> Result<Spread, SecretSyncFailure> {
    let namespaces = matching(workload, selector).await?;
    let ours = our_copies(workload, sync).await?;
    let name = &sync.spec.target_secret_ref.name;
    let mut spread = Spread::default();
    for ns in &namespaces {
        let api: Api<Secret> = Api::namespaced(workload.clone(), ns);
        let listed = ours
            .iter()
            .find(|s| s.namespace().as_deref() == Some(ns.as_str()) && &s.name_any() == name);
        let existing = match listed {
            Some(copy) => Ok(Some(copy.clone())),
            None => api.get_opt(name).await.map_err(workload_failed(format!(
                "get workload Secret \"{ns}/{name}\""
            ))),
        };
        let desired = desired_target(sync, content, ns, cluster_name);
        let result = match existing {
            Ok(existing) => converge(&api, sync, existing, desired).await,
            Err(f) => Err(f),
        };
        match result {
            Ok(changed) => {
                spread.changed |= changed;
                spread.synced.push(ns.clone());
            }
            Err(f) => spread.failed.push((ns.clone(), f)),
        }
    }
    let keep: BTreeSet<&str> = namespaces.iter().map(String::as_str).collect();
    for copy in &ours {
        let ns = copy.namespace().unwrap_or_default();
        if keep.contains(ns.as_str()) && &copy.name_any() == name {
            continue;
        }
        spread.changed = true;
        if let Err(m) = delete_owned(workload, sync, &ns, &copy.name_any()).await {
            spread.failed.push((ns, SecretSyncFailure::DeleteFailed(m)));
        }
    }
    Ok(spread)
}

/// Removes every copy this sync owns but `keep` (namespace, name); whether one was removed.
pub(super) async fn remove_copies(
    workload: &kube::Client,
    sync: &OmniSecretSync,
    keep: Option<(&str, &str)>,
) -> Result<bool, SecretSyncFailure> {
    let mut removed = false;
    for copy in our_copies(workload, sync).await? {
        let (ns, name) = (copy.namespace().unwrap_or_default(), copy.name_any());
        if keep == Some((ns.as_str(), name.as_str())) {
            continue;
        }
        delete_owned(workload, sync, &ns, &name)
            .await
            .map_err(SecretSyncFailure::DeleteFailed)?;
        removed = true;
    }
    Ok(removed)
}
