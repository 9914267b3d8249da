//! What an OmniKubeconfigExport writes into its Secret besides the credential, so fleet tools
//! find and sort the cluster: labels and annotations of the target (`spec.target`), the Argo CD
//! cluster Secret's `project` and `namespaces` (`spec.argoCD`). A set templates them from its
//! clusters (docs/fleet.md); none of them is part of the minted credential, so a change of
//! them rewrites the Secret without a new mint.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::kubeconfig_export::{ExportFormat, OmniKubeconfigExportSpec};
use super::validation::{FieldError, Validation};

/// Labels and annotations of the target Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ExportTarget {
    /// Labels added to the Secret (an Argo CD ApplicationSet's cluster generator selects
    /// clusters by them); the operator's own labels win.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to the Secret; the operator's own annotations win.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The Argo CD cluster Secret's scoping fields (format `ArgoCDCluster` only).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArgoCdRegistration {
    /// The Argo CD project the cluster belongs to (the Secret's `project` key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The namespaces Argo CD may manage there (the Secret's `namespaces` key, comma-separated);
    /// empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// With `namespaces`: whether Argo CD may also manage cluster-scoped resources (the
    /// Secret's `clusterResources` key).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_resources: bool,
}

/// Whether a label or annotation key is one the operator (or Argo CD's cluster marker) owns.
pub(crate) fn reserved_key(key: &str) -> bool {
    key.starts_with("omni.texashpc.com/")
        || key == "argocd.argoproj.io/secret-type"
        || key == "app.kubernetes.io/managed-by"
        || key == "cluster.x-k8s.io/cluster-name"
}

/// The admission rules of `spec.target`, `spec.argoCD` and the `ClusterAPI` format.
pub(crate) fn rules(spec: &OmniKubeconfigExportSpec, v: &mut Validation) {
    let format = spec.format.unwrap_or(ExportFormat::Kubeconfig);
    if let Some(target) = &spec.target {
        for (kind, map) in [
            ("labels", &target.labels),
            ("annotations", &target.annotations),
        ] {
            for key in map.keys().filter(|k| reserved_key(k)) {
                v.push(FieldError::forbidden(
                    format!("spec.target.{kind}[{key}]"),
                    "the operator sets this key itself",
                ));
            }
        }
    }
    if spec.argo_cd.is_some() && format != ExportFormat::ArgoCdCluster {
        v.push(FieldError::forbidden(
            "spec.argoCD",
            "applies only to format ArgoCDCluster",
        ));
    }
    if let Some(argo) = &spec.argo_cd
        && argo.cluster_resources
        && argo.namespaces.is_empty()
    {
        v.push(FieldError::forbidden(
            "spec.argoCD.clusterResources",
            "applies only with namespaces",
        ));
    }
    if format == ExportFormat::ClusterApi && !spec.target_secret_ref.name.ends_with("-kubeconfig") {
        v.push(FieldError::invalid(
            "spec.targetSecretRef.name",
            &spec.target_secret_ref.name,
            "format ClusterAPI writes the Secret Cluster API tools read: `<cluster>-kubeconfig`",
        ));
    }
}
