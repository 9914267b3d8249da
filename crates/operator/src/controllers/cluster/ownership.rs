//! Whose an existing Omni cluster is: the owner stamp the operator puts on the Omni `Cluster`
//! it creates or adopts, and whether this OmniCluster may change or delete what it finds.

use std::collections::HashMap;

use kube::ResourceExt;
use omni_client::template::types::CLUSTER as CLUSTER_TYPE;
use omni_client::template::{StateError, TemplateState};

use crate::api::OmniCluster;
use crate::api::keys::OMNI_OWNER_ANNOTATION;

/// The owner stamp of `cluster`.
pub(crate) fn owner_stamp(cluster: &OmniCluster) -> String {
    format!(
        "{}/{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any(),
        cluster.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// Whose an existing Omni cluster is, as far as this OmniCluster is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OmniOwnership {
    /// Stamped with this object's owner annotation.
    Owned,
    /// Unstamped, but synced by this object before clusters were stamped: its status records a
    /// successful sync of this very cluster name.
    SyncedBeforeStamps,
    /// Stamped by someone else (the stamp).
    OwnedByOther(String),
    /// No stamp: created by hand, by another tool or by another template.
    Unowned,
}

impl OmniOwnership {
    /// Whether this object may change or delete the Omni cluster unasked.
    pub(crate) fn is_ours(&self) -> bool {
        matches!(
            self,
            OmniOwnership::Owned | OmniOwnership::SyncedBeforeStamps
        )
    }

    /// Whose it is, for messages ("it …").
    pub(crate) fn describe(&self) -> String {
        match self {
            OmniOwnership::OwnedByOther(stamp) => {
                format!("belongs to {stamp} ({OMNI_OWNER_ANNOTATION})")
            }
            _ => "was not created by this OmniCluster".to_string(),
        }
    }
}

/// Pure ownership decision from the Omni Cluster's annotations and this object's status.
pub(crate) fn omni_ownership(
    cluster: &OmniCluster,
    annotations: &HashMap<String, String>,
) -> OmniOwnership {
    match annotations.get(OMNI_OWNER_ANNOTATION) {
        Some(stamp) if *stamp == owner_stamp(cluster) => OmniOwnership::Owned,
        Some(stamp) => OmniOwnership::OwnedByOther(stamp.clone()),
        None => {
            let status = cluster.status.as_ref();
            let synced = status.is_some_and(|s| {
                s.last_sync_time.is_some()
                    && s.cluster_name.as_deref() == Some(cluster.effective_cluster_name().as_str())
            });
            if synced {
                OmniOwnership::SyncedBeforeStamps
            } else {
                OmniOwnership::Unowned
            }
        }
    }
}

/// Reads the Omni Cluster `name`: `None` when it does not exist, else its ownership.
pub(super) async fn existing_ownership<S: TemplateState>(
    state: &S,
    cluster: &OmniCluster,
    name: &str,
) -> Result<Option<OmniOwnership>, StateError> {
    let found = state.get(CLUSTER_TYPE, name).await?;
    Ok(found.map(|r| {
        let annotations = r.metadata.map(|m| m.annotations).unwrap_or_default();
        omni_ownership(cluster, &annotations)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cluster::OmniClusterStatus;

    #[test]
    fn an_omni_cluster_is_ours_by_stamp_or_by_a_sync_recorded_before_stamps() {
        let mut c: OmniCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "edge", "namespace": "ops", "uid": "u-1"},
            "spec": {"connectionRef": {"name": "omni"}, "clusterName": "prod",
                     "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(owner_stamp(&c), "ops/edge/u-1");
        let stamp = |v: &str| HashMap::from([(OMNI_OWNER_ANNOTATION.to_string(), v.to_string())]);
        let none = HashMap::new();
        assert_eq!(
            omni_ownership(&c, &stamp("ops/edge/u-1")),
            OmniOwnership::Owned
        );
        assert_eq!(
            omni_ownership(&c, &stamp("ops/edge/u-0")),
            OmniOwnership::OwnedByOther("ops/edge/u-0".into()),
            "a re-created object of the same name is someone else"
        );
        assert_eq!(omni_ownership(&c, &none), OmniOwnership::Unowned);
        // A status that only names the cluster (set before any sync) proves nothing...
        c.status = Some(OmniClusterStatus {
            cluster_name: Some("prod".into()),
            ..OmniClusterStatus::default()
        });
        assert_eq!(omni_ownership(&c, &none), OmniOwnership::Unowned);
        // ...a recorded successful sync of that name does (clusters synced before stamps).
        if let Some(s) = c.status.as_mut() {
            s.last_sync_time = Some(
                "2026-01-01T00:00:00Z"
                    .parse()
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
        assert_eq!(omni_ownership(&c, &none), OmniOwnership::SyncedBeforeStamps);
        c.spec.cluster_name = Some("other".into());
        assert_eq!(omni_ownership(&c, &none), OmniOwnership::Unowned);
    }
}
